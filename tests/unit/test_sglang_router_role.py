"""The router role: off by default, its spec mirrors its defaults, and its unit starts the router
with the arguments a reader of the plan expects (the template rendered with sample variables)."""
from __future__ import annotations

import shlex
from pathlib import Path

import jinja2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "sglang_router"

DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
SAMPLE = {
    "ansible_managed": "Ansible managed",
    "sglang_router_user": "sglang",
    "sglang_router_group": "sglang",
    "sglang_router_config_dir": "/etc/dflash",
    "sglang_router_venv": "/opt/dflash/router/0.3.2",
    "sglang_router_base_dir": "/opt/dflash",
    **{k: v for k, v in DEFAULTS.items() if "{{" not in str(v)},
    "_sglang_router_model": {"model": "qwen3-8b-dflash", "unit": "qwen3-8b-dflash", "port": 30000,
                             "prometheus_port": 29000, "policy": "round_robin",
                             "workers": ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]},
}


def render(**overrides) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["quote"] = lambda s: shlex.quote(str(s))
    return env.from_string((ROLE / "templates" / "sglang-router.service.j2").read_text()).render(
        {**SAMPLE, **overrides})


def settings(unit: str) -> dict:
    out: dict = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def exec_start(unit: str) -> list:
    (line,) = settings(unit)["ExecStart"]
    return shlex.split(line)


def test_exec_start_runs_launch_router_with_the_model_s_ports_policy_and_health_checks():
    assert exec_start(render()) == [
        "/opt/dflash/router/0.3.2/bin/python", "-I", "/opt/dflash/bin/sglang-router-launch",
        "--host", "127.0.0.1", "--port", "30000",
        "--worker-urls", "$SGLANG_ROUTER_WORKER_URLS",  # systemd splits an unbraced $VAR into words
        "--policy", "round_robin",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", "29000",
        "--health-check-interval-secs", "60", "--health-failure-threshold", "3",
        "--health-success-threshold", "2", "--health-check-timeout-secs", "5",
        "--health-check-endpoint", "/health",
    ]


def test_health_check_flags_and_extra_args_come_from_the_variables():
    args = exec_start(render(sglang_router_health_check_interval_secs=10,
                             sglang_router_health_check_endpoint="/health_generate",
                             sglang_router_extra_args=["--log-level", "debug"],
                             _sglang_router_model={**SAMPLE["_sglang_router_model"], "policy": "cache_aware",
                                                   "port": 31000, "prometheus_port": 29005}))
    assert args[args.index("--health-check-interval-secs") + 1] == "10"
    assert args[args.index("--health-check-endpoint") + 1] == "/health_generate"
    assert args[args.index("--policy") + 1] == "cache_aware"
    assert args[args.index("--port") + 1] == "31000"
    assert args[args.index("--prometheus-port") + 1] == "29005"
    assert args[-2:] == ["--log-level", "debug"]


def test_the_unit_reads_its_workers_from_its_own_file_and_runs_hardened_without_devices():
    s = settings(render())
    assert s["EnvironmentFile"] == ["/etc/dflash/router/%i.workers", "/etc/dflash/router/%i.env"]
    assert s["User"] == ["sglang"] and s["Group"] == ["sglang"]
    assert s["PrivateDevices"] == ["yes"] and s["DevicePolicy"] == ["closed"]
    assert "DeviceAllow" not in s
    for key in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "CapabilityBoundingSet"):
        assert key in s, key
    assert s["ProtectSystem"] == ["strict"] and s["CapabilityBoundingSet"] == [""]


def test_the_router_binds_the_loopback_unless_an_address_is_named_and_its_key_is_on_no_command_line():
    """Round 3, N5: closed by default. The worker API is reached only from the host unless the operator names an
    address, and the launcher (not the unit's command line) gives launch_router its control-plane key, which the
    unit reads from the router's own env file."""
    assert DEFAULTS["sglang_router_host"] == "127.0.0.1"
    unit = render()
    assert exec_start(unit)[exec_start(unit).index("--host") + 1] == "127.0.0.1"
    (line,) = settings(unit)["ExecStart"]
    assert "--control-plane" not in line and "SGLANG_ROUTER_CONTROL_PLANE_API_KEY" not in line
    assert "/etc/dflash/router/%i.env" in settings(unit)["EnvironmentFile"]
    args = exec_start(render(sglang_router_host="0.0.0.0"))
    assert args[args.index("--host") + 1] == "0.0.0.0"


def test_unchecked_a_newline_in_a_value_would_become_a_unit_line_of_its_own():
    """Why router_setting_errors runs before any write (round 3, N6): the template itself writes what it is given."""
    unit = render(sglang_router_health_check_endpoint='/health\nExecStartPre=+/bin/sh -c "id > /run/x"')
    assert settings(unit)["ExecStartPre"] == ['+/bin/sh -c "id > /run/x"']


def test_off_by_default_and_the_spec_mirrors_the_defaults():
    assert DEFAULTS["sglang_router_enabled"] is False
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert sorted(spec) == sorted(DEFAULTS)
    # a literal default is spelled in the spec too; a derived one ("{{ ... }}") is described there instead
    assert {k: v.get("default") for k, v in spec.items()} == {
        k: None if "{{" in str(v) else v for k, v in DEFAULTS.items()}


def _tasks(node, where=REPO / "playbooks"):
    """Every task of a playbook's list, blocks and the playbook's own task files (include_tasks, a path
    relative to the including file's directory) followed."""
    for task in node if isinstance(node, list) else []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key), where)
        included = task.get("ansible.builtin.include_tasks")
        if included:
            path = where / (included["file"] if isinstance(included, dict) else included)
            yield from _tasks(yaml.safe_load(path.read_text()), path.parent)


def test_the_deploy_runs_the_role_only_when_enabled_and_after_the_service():
    plays = yaml.safe_load((REPO / "playbooks" / "deploy_dflash.yml").read_text())
    tasks = [t for play in plays for t in _tasks(play.get("tasks"))]
    names = [(t.get("ansible.builtin.include_role") or {}).get("name") for t in tasks]
    entries = [(i, (t.get("ansible.builtin.include_role") or {}).get("tasks_from", "main"))
               for i, t in enumerate(tasks) if names[i] == "dflash.deploy.sglang_router"]
    main = [i for i, entry in entries if entry == "main"]
    assert len(main) == 1, entries
    step = tasks[main[0]]
    assert step["when"] == "sglang_router_enabled | default(false) | bool"
    assert step["ansible.builtin.include_role"]["apply"]["tags"] == ["router"]
    service = [i for i, t in enumerate(tasks) if names[i] == "dflash.deploy.sglang_service"
               and "tasks_from" not in t["ansible.builtin.include_role"]]  # readiness is in its main
    assert service and service[-1] < main[0]
    # its settings are checked before any change: the check entry point before host_preflight (the first change)
    check = [i for i, entry in entries if entry == "check"]
    assert len(check) == 1 and check[0] < names.index("dflash.deploy.host_preflight"), entries
    assert tasks[check[0]]["when"] == "sglang_router_enabled | default(false) | bool"
    (block,) = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    assert block["when"] == "sglang_router_enabled | bool"


@pytest.mark.parametrize("phase", ["install.yml", "service.yml", "register.yml", "plan.yml", "drain.yml", "rejoin.yml",
                                   "check.yml", "surge.yml"])
def test_no_jinja_loop_in_the_task_files(phase):
    assert "{%" not in (ROLE / "tasks" / phase).read_text()


def test_the_key_is_made_once_unlogged_root_s_and_reads_back_as_one_variable(tmp_path):
    """The control-plane key task (round 3, N5): made only when the file is absent (force: false), never logged,
    0640 root:<group>, and its content read back as systemd and the modules read it: exactly the key."""
    import importlib.util
    import secrets

    (task,) = [t for t in yaml.safe_load((ROLE / "tasks" / "service.yml").read_text())
               if t.get("name") == "Make each router's control-plane key, once"]
    copy = task["ansible.builtin.copy"]
    assert task["no_log"] is True and copy["force"] is False and copy["mode"] == "0640"
    assert copy["owner"] == "root" and copy["group"] == "{{ sglang_router_group }}"
    assert copy["dest"] == "{{ sglang_router_config_dir }}/router/{{ _sglang_router_model.unit }}.env"
    key = "".join(secrets.choice("abcXYZ0189") for _i in range(43))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)  # as Ansible renders
    content = env.from_string(copy["content"]).render(lookup=lambda *a, **k: key)
    assert content == "SGLANG_ROUTER_CONTROL_PLANE_API_KEY=%s\n" % key
    spec = importlib.util.spec_from_file_location("dflash_router_client", REPO / "plugins" / "module_utils" /
                                                  "router" / "client.py")
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    (tmp_path / "m.env").write_text(content)
    assert client.control_plane_key(str(tmp_path / "m.env")) == key
