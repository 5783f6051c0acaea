"""The router's plan: one router per served model, its workers the instances serving it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "dflash_router_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "router.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

INSTANCES = [
    {"name": "q1", "port": 30001, "served_model_name": "qwen3-8b"},
    {"name": "q2", "port": 30002, "served_model_name": "qwen3-8b"},
    {"name": "l1", "port": 30011, "served_model_name": "llama"},
]
MODELS = {"qwen3-8b": {"port": 30000, "prometheus_port": 29000, "policy": "round_robin"},
          "llama": {"port": 30010, "prometheus_port": 29001}}


def test_managed_plan_groups_the_instances_by_served_model():
    assert mod.router_plan(INSTANCES, MODELS) == [
        {"model": "llama", "unit": "llama", "policy": "round_robin", "workers": ["http://127.0.0.1:30011"],
         "port": 30010, "prometheus_port": 29001, "url": "http://127.0.0.1:30010"},
        {"model": "qwen3-8b", "unit": "qwen3-8b", "policy": "round_robin",
         "workers": ["http://127.0.0.1:30001", "http://127.0.0.1:30002"],
         "port": 30000, "prometheus_port": 29000, "url": "http://127.0.0.1:30000"},
    ]


def test_a_managed_router_s_two_ports_are_its_own_unit_s_on_the_host():
    ports = mod.router_host_ports(mod.router_plan(INSTANCES, MODELS))
    assert ports == [
        {"name": "the router of 'llama' (port)", "port": 30010, "unit": "sglang-router@llama.service"},
        {"name": "the router of 'llama' (metrics port)", "port": 29001, "unit": "sglang-router@llama.service"},
        {"name": "the router of 'qwen3-8b' (port)", "port": 30000, "unit": "sglang-router@qwen3-8b.service"},
        {"name": "the router of 'qwen3-8b' (metrics port)", "port": 29000, "unit": "sglang-router@qwen3-8b.service"},
    ]


def test_an_external_router_listens_on_no_port_of_the_host():
    assert mod.router_host_ports(mod.router_plan(INSTANCES, {}, "external", "http://192.0.2.5:30000")) == []


def test_grouping_by_router_url():
    plan = mod.router_plan(INSTANCES, MODELS)
    assert mod.router_workers_by_url(plan) == {
        "http://127.0.0.1:30000": ["http://127.0.0.1:30001", "http://127.0.0.1:30002"],
        "http://127.0.0.1:30010": ["http://127.0.0.1:30011"],
    }


def test_external_routers_sharing_a_url_get_every_model_s_workers():
    plan = mod.router_plan(INSTANCES, {}, "external", "http://192.0.2.5:30000/", "192.0.2.10")
    assert [p["url"] for p in plan] == ["http://192.0.2.5:30000", "http://192.0.2.5:30000"]
    assert "port" not in plan[0]
    assert mod.router_workers_by_url(plan) == {"http://192.0.2.5:30000": [
        "http://192.0.2.10:30001", "http://192.0.2.10:30002", "http://192.0.2.10:30011"]}


def test_external_model_url_wins_over_the_shared_one():
    plan = mod.router_plan(INSTANCES, {"llama": {"url": "http://192.0.2.6:8000"}}, "external", "http://192.0.2.5:30000")
    assert {p["model"]: p["url"] for p in plan} == {
        "llama": "http://192.0.2.6:8000", "qwen3-8b": "http://192.0.2.5:30000"}


def test_no_instances_no_router():
    assert mod.router_plan([], MODELS) == []
    assert mod.router_workers_by_url([]) == {}


def test_a_worker_port_counts_once():
    twice = INSTANCES[:1] + [dict(INSTANCES[0], name="q1b")]
    assert mod.router_plan(twice, MODELS)[0]["workers"] == ["http://127.0.0.1:30001"]


@pytest.mark.parametrize("models, message", [
    ({"qwen3-8b": MODELS["qwen3-8b"]}, "served model 'llama' has no entry in sglang_router_models"),
    ({**MODELS, "llama": {"port": 30010}}, "sglang_router_models['llama'].prometheus_port None is not a port"),
    ({**MODELS, "llama": {"port": 30001, "prometheus_port": 29001}},
     "sglang_router_models['llama'].port 30001 is also the port of instance q1"),
    ({**MODELS, "llama": {"port": 30010, "prometheus_port": 29000}},
     "sglang_router_models['qwen3-8b'].prometheus_port 29000 is also the port of the router of 'llama' "
     "(prometheus_port)"),
    ({**MODELS, "llama": {"port": 30010, "prometheus_port": 29001, "policy": "fastest"}},
     "sglang_router_models['llama'].policy 'fastest' is not one of"),
    ({**MODELS, "llama": {"port": "x", "prometheus_port": 29001}},
     "sglang_router_models['llama'].port 'x' is not a port"),
    ({**MODELS, "llama": {"port": True, "prometheus_port": 29001}},
     "sglang_router_models['llama'].port True is not a port"),
    ({**MODELS, "llama": "30010"}, "sglang_router_models['llama'] must be a mapping"),
])
def test_managed_errors_name_the_model_and_the_key(models, message):
    errors = mod.router_errors(INSTANCES, models)
    assert len(errors) == 1 and errors[0].startswith(message), errors
    with pytest.raises(ValueError, match="sglang_router_models"):
        mod.router_plan(INSTANCES, models)


def test_digits_are_ports_too():
    models = {**MODELS, "llama": {"port": "30010", "prometheus_port": "29001"}}
    assert mod.router_errors(INSTANCES, models) == []
    assert mod.router_plan(INSTANCES, models)[0]["port"] == 30010


def test_external_needs_a_url_and_no_ports():
    assert mod.router_errors(INSTANCES, {}, "external", "") == [
        "served model 'llama' has no router: set sglang_router_url or sglang_router_models['llama'].url",
        "served model 'qwen3-8b' has no router: set sglang_router_url or sglang_router_models['qwen3-8b'].url"]
    assert mod.router_errors(INSTANCES, {}, "external", "http://192.0.2.5:30000") == []


def test_unknown_mode_and_missing_model_name():
    assert mod.router_errors(INSTANCES, MODELS, "sidecar") == [
        "sglang_router_mode 'sidecar' is not one of managed, external"]
    errors = mod.router_errors(INSTANCES + [{"name": "x", "port": 30020, "served_model_name": ""}], MODELS)
    assert errors == ["instance(s) x have no served_model_name: the router groups its workers by it"]
    assert mod.router_errors(INSTANCES, ["qwen3-8b"]) == [
        "sglang_router_models must be a mapping {served_model_name: {port, prometheus_port, policy}}"]


@pytest.mark.parametrize("name, unit", [
    ("qwen3-8b-dflash", "qwen3-8b-dflash"),
    ("Qwen/Qwen3-8B", "Qwen\\x2fQwen3-8B"),
    ("Qwen-Qwen3-8B", "Qwen-Qwen3-8B"),
    ("a\\b", "a\\x5cb"),
    ("a b", "a\\x20b"),
    (".hidden", "\\x2ehidden"),
    ("a.b_c:d", "a.b_c:d"),
])
def test_unit_instance_keeps_unit_name_characters_and_escapes_the_rest(name, unit):
    assert mod.unit_instance(name) == unit
    assert mod.router_plan([{"name": "i", "port": 1, "served_model_name": name}],
                           {name: {"port": 2, "prometheus_port": 3}})[0]["unit"] == unit


def test_restart_waves_never_restart_two_instances_of_one_model_together():
    three = INSTANCES + [{"name": "q3", "port": 30003, "served_model_name": "qwen3-8b"}]
    # each wave the k-th of each model, in the order asked
    assert mod.router_restart_waves(three, ["q1", "l1", "q2", "q3"]) == [["q1", "l1"], ["q2"], ["q3"]]
    assert mod.router_restart_waves(three, ["q3", "q1"]) == [["q3"], ["q1"]]
    # one instance of a model restarting while the other serves: one wave
    assert mod.router_restart_waves(INSTANCES, ["q2", "l1"]) == [["q2", "l1"]]
    # unknown names and instances without a served model go first; a repeated name once
    odd = INSTANCES + [{"name": "x", "port": 30099}]
    assert mod.router_restart_waves(odd, ["q1", "x", "q2", "gone", "q1"]) == [["q1", "x", "gone"], ["q2"]]


def test_without_the_router_every_instance_restarts_in_one_wave():
    assert mod.router_restart_waves(INSTANCES, ["q1", "q2", "l1"], False) == [["q1", "q2", "l1"]]
    assert mod.router_restart_waves(INSTANCES, [], True) == []
    assert mod.router_restart_waves(INSTANCES, None, False) == []


def test_drain_targets_are_the_named_instances_with_a_router():
    plan = mod.router_plan(INSTANCES, MODELS)
    instances = INSTANCES + [{"name": "x", "port": 30099, "served_model_name": "no-router"}]
    assert mod.router_drain_targets(plan, instances, ["q2", "l1", "x", "gone"], "192.0.2.10") == [
        {"name": "q2", "model": "qwen3-8b", "router": "http://127.0.0.1:30000", "worker": "http://192.0.2.10:30002"},
        {"name": "l1", "model": "llama", "router": "http://127.0.0.1:30010", "worker": "http://192.0.2.10:30011"}]
    assert mod.router_drain_targets(plan, INSTANCES, []) == []


def _result(name, router="http://127.0.0.1:30000", port=30001, **res):
    target = {"name": name, "model": "qwen3-8b", "router": router, "worker": "http://127.0.0.1:%d" % port}
    return {"_sglang_router_drain_target": target, "invocation": {"module_args": {"timeout": 120.0}}, **res}


def test_drains_from_the_module_results_and_their_lines():
    results = [
        _result("q1", registered=True, removed=True, drained=True, seconds=3.24, in_flight=0,
                router="http://127.0.0.1:30000", worker="http://127.0.0.1:30001", router_answered=True),
        _result("q2", port=30002, registered=True, removed=True, timed_out=True, seconds=120.3, in_flight=2,
                router_answered=True),
        _result("q3", port=30003, registered=True, removed=True, timed_out=True, seconds=121, in_flight=None,
                reason="GET /v1/loads answered 404", router_answered=True),
        _result("q4", port=30004, registered=False, router_answered=True),
        _result("q5", port=30005, registered=False, router_answered=False, reason="the router ... does not answer"),
        # failed_when: false leaves `failed` off: a module that failed has no `registered`
        _result("q6", port=30006, failed=False, failed_when_result=False,
                msg="the router at http://127.0.0.1:30000 answered 500 to GET /workers"),
        _result("q7", port=30007, registered=True, changed=True, router_answered=True),  # check mode
    ]
    drains = mod.router_drains(results)
    assert drains[0] == {"instance": "q1", "model": "qwen3-8b", "router": "http://127.0.0.1:30000",
                         "worker": "http://127.0.0.1:30001", "registered": True, "removed": True, "drained": True,
                         "timed_out": False, "seconds": 3.24, "bound": 120.0, "in_flight": 0, "reason": None,
                         "error": None, "router_answered": True}
    assert drains[5]["error"] and not drains[5]["router_answered"] and not drains[5]["removed"]
    rejoins = mod.router_rejoins([
        {"item": {"key": "http://127.0.0.1:30000", "value": ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]},
         "after": [], "failed": False},
        {"item": {"key": "http://127.0.0.1:30010", "value": ["http://127.0.0.1:30003"]}, "failed": False,
         "msg": "the router at http://127.0.0.1:30010 refused worker http://127.0.0.1:30003: no"}])
    assert rejoins[0] == {"router": "http://127.0.0.1:30000",
                          "workers": ["http://127.0.0.1:30001", "http://127.0.0.1:30002"], "registered": True,
                          "error": None}
    assert mod.router_drain_lines(drains, rejoins) == [
        "router: q1 taken out of http://127.0.0.1:30000, drained in 3.2s",
        "router: q2 taken out of http://127.0.0.1:30000, NOT drained: 2 requests still in flight at the 120s bound, "
        "restarted with them",
        "router: q3 taken out of http://127.0.0.1:30000, NOT drained: its load unknown (GET /v1/loads answered 404) "
        "until the 120s bound, then restarted",
        "router: http://127.0.0.1:30000 does not answer: q5 not drained",
        "router: q6 was not taken out of http://127.0.0.1:30000 (the router at http://127.0.0.1:30000 answered 500 "
        "to GET /workers); it restarted without a drain",
        "router: q7 would be taken out of http://127.0.0.1:30000 and drained (at most 120s) before its restart",
        "router: q1, q2 registered again with http://127.0.0.1:30000",
        "router: http://127.0.0.1:30003 NOT registered again with http://127.0.0.1:30010: the router at "
        "http://127.0.0.1:30010 refused worker http://127.0.0.1:30003: no",
    ]
    assert mod.router_drain_lines([]) == [] and mod.router_drain_lines(None, None) == []


def test_rejoin_targets_are_the_drained_workers_of_the_named_instances():
    drains = [{"instance": "q1", "router": "http://r:1", "worker": "http://127.0.0.1:30001", "removed": True},
              {"instance": "q2", "router": "http://r:1", "worker": "http://127.0.0.1:30002", "removed": True},
              {"instance": "q3", "router": "http://r:1", "worker": "http://127.0.0.1:30003", "removed": False},
              {"instance": "l1", "router": "http://r:2", "worker": "http://127.0.0.1:30011", "removed": True}]
    assert mod.router_rejoin_targets(drains, ["q2", "q1", "q3", "l1"]) == {
        "http://r:1": ["http://127.0.0.1:30001", "http://127.0.0.1:30002"], "http://r:2": ["http://127.0.0.1:30011"]}
    assert mod.router_rejoin_targets(drains, ["q2"]) == {"http://r:1": ["http://127.0.0.1:30002"]}
    assert mod.router_rejoin_targets(drains, []) == {} and mod.router_rejoin_targets(None, ["q1"]) == {}


def test_surge_records_and_their_line():
    item = {"name": "solo.surge", "model": "m", "router": "http://127.0.0.1:30200", "worker": "http://127.0.0.1:30005"}
    registered = mod.router_surge_record({"item": item, "after": ["http://127.0.0.1:30005"]}, "present")
    assert registered == {"instance": "solo.surge", "router": "http://127.0.0.1:30200", "worker": "http://127.0.0.1:30005",
                          "state": "present", "ok": True, "seconds": 0.0, "error": None}
    drained = mod.router_surge_record({"item": item, "registered": True, "removed": True, "seconds": 2.14}, "absent")
    assert mod.router_surge_line(drained) == (
        "router: surge worker solo.surge served while its instance restarted; taken out of http://127.0.0.1:30200, "
        "drained in 2.1s, stopped")
    refused = mod.router_surge_record({"item": item, "failed": True, "msg": "HTTP 500"}, "absent")
    assert not refused["ok"] and refused["error"] == "HTTP 500"
    assert mod.router_surge_line(refused) == (
        "router: surge worker solo.surge was not taken out of http://127.0.0.1:30200 (HTTP 500); it was stopped")
    assert not mod.router_surge_record({"item": item}, "present")["ok"]   # no answer: not registered


# The role's values in the router's unit (round 3, N6): refused before any change, one line naming the variable.
UNIT_SETTINGS = {
    "sglang_router_host": "127.0.0.1", "sglang_router_prometheus_host": "127.0.0.1",
    "sglang_router_worker_host": "127.0.0.1", "sglang_router_base_dir": "/opt/dflash",
    "sglang_router_config_dir": "/etc/dflash", "sglang_router_venv": "/opt/dflash/router/0.3.2",
    "sglang_router_user": "sglang", "sglang_router_group": "sglang",
    "sglang_router_health_check_interval_secs": 60, "sglang_router_health_failure_threshold": "3",
    "sglang_router_health_success_threshold": 2, "sglang_router_health_check_timeout_secs": 5,
    "sglang_router_health_check_endpoint": "/health", "sglang_router_restart_sec": 5,
    "sglang_router_extra_args": ["--log-level", "debug"],
}
INJECTION = '/health\nExecStartPre=+/bin/sh -c "id > /run/rt3-router-inject"'


def test_the_defaults_and_values_that_only_look_dangerous_pass():
    assert mod.router_setting_errors(UNIT_SETTINGS) == []
    assert mod.router_setting_errors({
        **UNIT_SETTINGS, "sglang_router_host": "::", "sglang_router_prometheus_host": "router-1.example.org",
        "sglang_router_worker_host": "[fd00::5]", "sglang_router_health_check_endpoint": "/health_generate",
        "sglang_router_extra_args": ["--cors-allowed-origins", "https://a.example/x?y=1&z=2;w", "a value with spaces",
                                     "--request-id-headers=x-request-id", "ExecStartPre=+/bin/true"],
    }) == []


@pytest.mark.parametrize("name", ["sglang_router_health_check_endpoint", "sglang_router_host",
                                  "sglang_router_prometheus_host", "sglang_router_worker_host",
                                  "sglang_router_config_dir", "sglang_router_user"])
def test_a_newline_in_any_unit_value_is_refused_naming_the_variable_not_the_value(name):
    (error,) = mod.router_setting_errors({**UNIT_SETTINGS, name: INJECTION})
    assert error.startswith(name + " holds a newline: a unit value must be one line")
    assert "ExecStartPre" not in error and "\n" not in error


@pytest.mark.parametrize("value, what", [
    ("/health\rX", "holds a carriage return"), ("/health\x00", "holds a control character"),
    ("/health\tx", "holds a control character"), ("/health%n", "holds '%', which systemd would expand"),
    ("/health$HOME", "holds '$', which systemd would expand as a variable in ExecStart="),
])
def test_cr_control_characters_percent_and_dollar_are_refused(value, what):
    (error,) = mod.router_setting_errors({**UNIT_SETTINGS, "sglang_router_health_check_endpoint": value})
    assert error.startswith("sglang_router_health_check_endpoint " + what), error
    assert value not in error


def test_extra_args_items_are_checked_one_by_one_without_showing_them():
    errors = mod.router_setting_errors({**UNIT_SETTINGS, "sglang_router_extra_args": [
        "--log-level", "info\nExecStartPre=+/bin/sh", "100%", "$HOME", "it's", "a\\b", "",
        "--control-plane-api-keys", "k:n:admin:SECRET-1", "--jwt-issuer=x"]})
    assert errors == [
        "sglang_router_extra_args item 2 holds a newline: a unit value must be one line (it would start a unit line "
        "of its own)",
        "sglang_router_extra_args item 3 holds '%', which systemd would expand as a specifier in the unit",
        "sglang_router_extra_args item 4 holds '$', which systemd would expand as a variable in ExecStart=",
        "sglang_router_extra_args item 5 holds a single quote, which systemd's ExecStart= reads otherwise than the "
        "shell quoting the role writes",
        "sglang_router_extra_args item 6 holds a backslash, which systemd's ExecStart= reads otherwise than the "
        "shell quoting the role writes",
        "sglang_router_extra_args item 7 is empty",
        "sglang_router_extra_args item 8 is a control-plane authentication flag, which the role sets itself (the "
        "router's key, SGLANG_ROUTER_CONTROL_PLANE_API_KEY in its env file, off the command line): remove it",
        "sglang_router_extra_args item 10 is a control-plane authentication flag, which the role sets itself (the "
        "router's key, SGLANG_ROUTER_CONTROL_PLANE_API_KEY in its env file, off the command line): remove it",
    ]
    assert mod.router_setting_errors({**UNIT_SETTINGS, "sglang_router_extra_args": "--log-level debug"}) == [
        "sglang_router_extra_args is a str: give a list of words"]


def test_hosts_paths_accounts_counts_and_the_endpoint_must_be_what_they_name():
    errors = mod.router_setting_errors({
        **UNIT_SETTINGS, "sglang_router_host": "0.0.0.0 --foo", "sglang_router_venv": "router/0.3.2",
        "sglang_router_base_dir": "/opt/../etc", "sglang_router_group": "sg lang",
        "sglang_router_restart_sec": "5s", "sglang_router_health_failure_threshold": -1,
        "sglang_router_health_check_endpoint": "health", "sglang_router_prometheus_host": ["127.0.0.1"]})
    assert errors == [
        "sglang_router_host: give an IP address or a host name (letters, digits, '.', ':', '-', '_')",
        "sglang_router_prometheus_host is a list: give one value",
        "sglang_router_base_dir: give an absolute path of letters, digits and . _ + - / only (the unit names it)",
        "sglang_router_venv: give an absolute path of letters, digits and . _ + - / only (the unit names it)",
        "sglang_router_group: give a user or group name of letters, digits, '_', '.' and '-'",
        "sglang_router_health_failure_threshold: give a whole number of 0 or more",
        "sglang_router_health_check_endpoint: give a path such as /health (letters, digits and . _ ~ - /)",
        "sglang_router_restart_sec: give a whole number of 0 or more",
    ]


def test_a_managed_router_s_key_file_is_its_env_file_and_an_external_router_has_none():
    plan = mod.router_plan(INSTANCES, MODELS)
    assert mod.router_key_files(plan, "managed", "/etc/dflash") == {
        "http://127.0.0.1:30010": "/etc/dflash/router/llama.env",
        "http://127.0.0.1:30000": "/etc/dflash/router/qwen3-8b.env"}
    external = mod.router_plan(INSTANCES, {}, "external", "http://10.0.0.5:30000")
    assert mod.router_key_files(external, "external", "/etc/dflash") == {}
