"""The performance gate's decisions in sglang_service: what perf_probe is asked per restarted instance,
what its answers mean for the promotion (all or none), and which settings are refused up front."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "dflash_perf_gate_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "perf_gate.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

OLD = "/opt/dflash/releases/38daf6d080f8bba8"
NEW = "/opt/dflash/releases/5c1e0a9b3d2f4e61"
SETTINGS = {"enabled": True, "max_ttft_regression": 0.2, "max_itl_regression": 0.2, "max_throughput_regression": 0.2,
            "min_acceptance_ratio": 0.9, "prompts": [], "max_tokens": 64, "warmup": 1, "timeout": 120.0}
GPUS = [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-b"}, {"index": 2, "uuid": "GPU-c"}]
A = {"name": "qwen3-8b", "port": 30001, "gpus": [1]}
B = {"name": "probe", "port": 30002, "gpus": [2, 0]}


def current(name, target=None):
    """switch.yml's stat of an instance's current link before the flip."""
    stat = {"exists": True, "islnk": True, "lnk_source": target} if target else {"exists": False}
    return {"item": {"name": name}, "stat": stat}


def requests(waited=(A, B), settings=None, gpus=None, before=((A["name"], OLD), (B["name"], None))):
    settings = SETTINGS if settings is None else settings
    gpus = GPUS if gpus is None else gpus
    return mod.perf_gate_requests(list(waited), settings, gpus, NEW, [current(n, t) for n, t in before], "/etc/dflash/")


def test_each_restarted_instance_is_measured_against_the_release_it_ran_before_on_its_cards():
    a, b = requests()
    assert a == {
        "name": "qwen3-8b", "port": 30001, "env_file": "/etc/dflash/qwen3-8b.env", "release": "5c1e0a9b3d2f4e61",
        "gpus": ["GPU-b"], "baseline": OLD + "/.dflash-release/perf-qwen3-8b.json",
        "baseline_release": "38daf6d080f8bba8", "candidate": NEW + "/.dflash-release/perf-qwen3-8b.next.json",
        "record": NEW + "/.dflash-release/perf-qwen3-8b.json",
        "prompts": None, "max_ttft_regression": 0.2, "max_itl_regression": 0.2, "max_throughput_regression": 0.2,
        "min_acceptance_ratio": 0.9, "max_tokens": 64, "warmup": 1, "timeout": 120.0, "measure": True, "reason": ""}
    # a new instance has no release before it: no baseline (perf_probe passes it); its cards in its own order
    assert (b["baseline"], b["baseline_release"], b["gpus"]) == ("", "", ["GPU-c", "GPU-a"])
    # the instance's own record, never another instance's, even on the same release
    assert b["record"].endswith("/perf-probe.json")


def test_a_configuration_change_on_the_same_release_is_compared_with_that_release_s_record():
    (a,) = requests(waited=[A], before=[(A["name"], NEW)])
    assert a["baseline"] == a["record"] != a["candidate"]


def test_an_instance_s_perf_gate_overrides_the_role_s_settings():
    own = dict(A, perf_gate={"max_itl_regression": 0.5, "prompts": ["hello"], "warmup": 0})
    off = dict(B, perf_gate={"enabled": False})
    a, b = requests(waited=[own, off])
    assert (a["max_itl_regression"], a["max_ttft_regression"], a["prompts"], a["warmup"]) == (0.5, 0.2, ["hello"], 0)
    assert (b["measure"], b["reason"]) == (False, "the performance gate is off for this instance")
    # off for the role, on for one instance
    a, b = requests(waited=[dict(A, perf_gate={"enabled": True}), B], settings=dict(SETTINGS, enabled=False))
    assert (a["measure"], b["measure"]) == (True, False)


def test_without_preflight_s_cards_nothing_is_measured_rather_than_recorded_for_no_card():
    a, b = requests(gpus=[])
    assert not a["measure"] and "the card behind GPU 1 is unknown (preflight did not run)" in a["reason"]
    (a,) = requests(waited=[A], gpus=[{"index": 1}])
    assert not a["measure"]


def test_a_missing_release_is_an_error_not_a_path_under_root():
    with pytest.raises(mod.AnsibleFilterError):
        mod.perf_gate_requests([A], SETTINGS, GPUS, "", [], "/etc/dflash")


def probe_result(req, status="passed", recorded=True, msg="4 requests of 64 tokens: ...", figures=True):
    """perf_probe's loop result (failed_when: false)."""
    verdict = None if status is None else {"status": status, "passed": status != "refused",
                                           "baseline_release": "38daf6d080f8bba8", "reason": None}
    return {"_rollout_perf_req": req, "failed": False, "msg": msg, "verdict": verdict, "recorded": recorded,
            "baseline_release": "38daf6d080f8bba8" if status else None,
            "figures": {"ttft_ms": 41.2, "itl_ms": 7.95, "output_tokens_per_s": 118.3, "acceptance": 3.12}
            if figures else None}


def test_every_instance_passing_promotes_every_candidate_record():
    reqs = requests()
    out = mod.perf_gate_outcome(reqs, [probe_result(reqs[0]), probe_result(reqs[1], status="no_baseline")])
    assert out["refused"] == {}
    assert out["promote"] == [{"name": r["name"], "candidate": r["candidate"], "record": r["record"]} for r in reqs]
    assert out["instances"]["qwen3-8b"] == {
        "release": "5c1e0a9b3d2f4e61", "status": "passed", "baseline_release": "38daf6d080f8bba8",
        "figures": {"ttft_ms": 41.2, "itl_ms": 7.95, "output_tokens_per_s": 118.3, "acceptance": 3.12},
        "reason": None, "message": "4 requests of 64 tokens: ..."}
    assert out["instances"]["probe"]["status"] == "no_baseline"


def test_one_refused_instance_promotes_none_and_names_the_figure():
    reqs = requests()
    line = ("the performance gate refused release 5c1e0a9b3d2f4e61 against release 38daf6d080f8bba8: inter-token "
            "latency 50.1 ms against 7.95 ms for release 38daf6d080f8bba8 (+530 %, limit +20 %)")
    out = mod.perf_gate_outcome(reqs, [probe_result(reqs[0], status="refused", recorded=False, msg=line),
                                       probe_result(reqs[1])])
    assert out["refused"] == {"qwen3-8b": line}
    assert out["promote"] == []  # all or none: probe passed, and goes back with the other
    assert out["instances"]["qwen3-8b"]["status"] == "refused"
    assert out["instances"]["qwen3-8b"]["message"] == line
    assert out["instances"]["probe"]["status"] == "passed"


def test_a_probe_that_could_not_measure_or_record_refuses_the_promotion():
    reqs = requests(waited=[A])
    cant = "the performance probe could not measure http://127.0.0.1:30001: connection refused\nmore"
    out = mod.perf_gate_outcome(reqs, [probe_result(reqs[0], status=None, recorded=False, msg=cant, figures=False)])
    assert out["refused"] == {"qwen3-8b": "the performance probe could not measure http://127.0.0.1:30001: "
                                          "connection refused"}
    assert out["instances"]["qwen3-8b"]["status"] == "error" and out["promote"] == []
    unrecorded = probe_result(reqs[0], recorded=False, msg="cannot record the figures in /x: Permission denied")
    out = mod.perf_gate_outcome(reqs, [unrecorded])
    assert out["refused"] == {"qwen3-8b": "cannot record the figures in /x: Permission denied"}
    # no answer at all (the loop did not reach it)
    assert mod.perf_gate_outcome(reqs, [])["refused"] == {"qwen3-8b": "perf_probe gave no answer"}


def test_an_instance_not_measured_is_reported_and_holds_back_no_one():
    cards = [{"index": 2, "uuid": "GPU-c"}, {"index": 0, "uuid": "GPU-a"}]
    reqs = requests(waited=[dict(A, perf_gate={"enabled": False}), B], gpus=cards)
    out = mod.perf_gate_outcome(reqs, [{"_rollout_perf_req": reqs[0], "skipped": True},
                                       probe_result(reqs[1], status="no_baseline")])
    assert out["refused"] == {}
    assert out["instances"]["qwen3-8b"]["status"] == "off" and out["instances"]["qwen3-8b"]["figures"] is None
    assert [p["name"] for p in out["promote"]] == ["probe"]
    reqs = requests(waited=[A], gpus=[])
    assert mod.perf_gate_outcome(reqs, [])["instances"]["qwen3-8b"]["status"] == "not_measured"


def test_settings_the_gate_cannot_use_are_named_before_anything_changes():
    assert mod.perf_gate_errors([A, B], SETTINGS) == []
    bad = dict(SETTINGS, enabled="yes", max_itl_regression=-1, max_tokens=1, warmup=0.5, prompts=["", [1, 2]])
    assert mod.perf_gate_errors([], bad) == [
        "sglang_service_perf_gate_enabled is not true or false",
        "sglang_service_perf_gate_max_itl_regression is not a number of at least 0",
        "sglang_service_perf_gate_prompts holds an item that is neither a non-empty text nor a non-empty list of "
        "token ids",
        "sglang_service_perf_gate_max_tokens is not a whole number of at least 2",
        "sglang_service_perf_gate_warmup is not a whole number of at least 0"]
    instances = [dict(A, perf_gate={"max_itl": 0.3, "timeout": "soon"}), dict(B, perf_gate=["enabled"])]
    assert mod.perf_gate_errors(instances, SETTINGS) == [
        "instance qwen3-8b: perf_gate has no setting 'max_itl' (one of enabled, max_ttft_regression, "
        "max_itl_regression, max_throughput_regression, min_acceptance_ratio, prompts, max_tokens, warmup, timeout)",
        "instance qwen3-8b: perf_gate timeout is not a number of at least 0",
        "instance probe: perf_gate is a list: give a mapping of enabled, max_ttft_regression, max_itl_regression, "
        "max_throughput_regression, min_acceptance_ratio, prompts, max_tokens, warmup, timeout"]
