"""perf_probe run as Ansible runs it on a host, against an SGLang stand-in on 127.0.0.1 in this
process that streams at set delays (tests/support/perf_server.py): the first release is recorded, a
slower one is refused naming each figure, a faster one passes and replaces nothing but its own record;
figures of another probe or other GPUs are not compared; check mode sends nothing; the key is never
shown."""
from __future__ import annotations

import json
import os
import pwd

import pytest
from module_runner import run_module
from perf_server import sglang_stream

# the stand-in runs in this process, outside any unit: its user is the one that may hold the port
PROBE_OPTS = {"prompts": ["a", "b", "c"], "max_tokens": 4, "warmup": 1, "timeout": 10,
              "user": pwd.getpwuid(os.getuid()).pw_name}


def port_of(base):
    return int(base.rsplit(":", 1)[1])


def probe(base, _check=False, **args):
    return run_module("perf_probe", dict(PROBE_OPTS, port=port_of(base), **args), check=_check, timeout=60)


def baseline_file(tmp_path, digest, release="5c1e", gpus=("GPU-1",), **figures):
    """A record as an earlier run wrote it, with the figures given."""
    path = tmp_path / "perf-baseline.json"
    path.write_text(json.dumps({
        "format": 1, "release": release, "gpus": list(gpus), "when": "2026-12-01T10:00:00Z",
        "probe": {"endpoint": "/generate", "prompts": 3, "max_tokens": 4, "warmup": 1, "digest": digest},
        "figures": dict({"ttft_ms": 100.0, "itl_ms": 10.0, "output_tokens_per_s": 50.0, "acceptance": 2.0,
                         "requests": 3, "output_tokens": 12}, **figures)}))
    return path


def test_the_first_release_is_measured_and_recorded(tmp_path):
    record = tmp_path / "perf-r1.json"
    with sglang_stream(first=0.12, gap=0.03, steps=(1, 2, 1)) as base:
        rc, res = probe(base, release="r1", gpus=["GPU-1"], baseline=str(tmp_path / "none.json"),
                        record=str(record))
    assert rc == 0, res
    f = res["figures"]
    assert f["requests"] == 3 and f["output_tokens"] == 12 and f["acceptance"] == 2.0
    assert 120 <= f["ttft_ms"] < 1000 and 10 <= f["itl_ms"] < 500 and f["output_tokens_per_s"] > 0
    assert res["verdict"]["status"] == "no_baseline" and res["verdict"]["passed"] is True
    assert res["recorded"] is True and res["changed"] is True and res["baseline_release"] is None
    assert [r["tokens"] for r in res["requests"]] == [4, 4, 4] and res["requests"][0]["verify_ct"] == 2
    written = json.loads(record.read_text())
    assert written["release"] == "r1" and written["gpus"] == ["GPU-1"] and written["figures"] == f
    assert written["probe"] == res["probe"] and len(res["probe"]["digest"]) == 64
    assert oct(os.stat(record).st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".perf-")] == []
    assert "not compared: no figures recorded" in res["msg"] and f"recorded in {record}" in res["msg"]


def test_a_slower_release_is_refused_naming_each_figure(tmp_path):
    with sglang_stream(first=0.01, gap=0.01) as base:
        digest = probe(base, _check=True)[1]["probe"]["digest"]
    baseline = baseline_file(tmp_path, digest, ttft_ms=20.0, itl_ms=5.0, output_tokens_per_s=1000.0, acceptance=4.0)
    before = baseline.read_text()
    record = tmp_path / "perf-r2.json"
    with sglang_stream(first=0.2, gap=0.05) as base:
        rc, res = probe(base, release="r2", gpus=["GPU-1"], baseline=str(baseline), record=str(record))
    assert rc == 1 and res["failed"] is True and res["recorded"] is False
    assert res["msg"].startswith("the performance gate refused release r2 against release 5c1e: time to first token ")
    failures = res["verdict"]["failures"]
    assert [line.split(" ")[0] for line in failures] == ["time", "inter-token", "output", "acceptance"]
    assert failures[0].endswith("ms against 20.0 ms for release 5c1e (+%s %%, limit +20 %%)"
                                % failures[0].split("(+")[1].split(" %")[0])
    assert failures[3] == "acceptance 1.33 against 4.00 tokens per verify step for release 5c1e (-67 %, limit -10 %)"
    assert all(line in res["msg"] for line in failures)
    assert not record.exists() and baseline.read_text() == before


def test_a_faster_release_passes_and_is_recorded(tmp_path):
    with sglang_stream(first=0.01, gap=0.01) as base:
        digest = probe(base, _check=True)[1]["probe"]["digest"]
        baseline = baseline_file(tmp_path, digest, ttft_ms=5000.0, itl_ms=500.0, output_tokens_per_s=1.0,
                                 acceptance=1.0)
        record = tmp_path / "perf-r3.json"
        rc, res = run_module("perf_probe", dict(PROBE_OPTS, port=port_of(base), release="r3", gpus=["GPU-1"],
                                                baseline=str(baseline), record=str(record)), diff=True)
    assert rc == 0, res
    assert res["verdict"]["status"] == "passed" and len(res["verdict"]["checks"]) == 4
    assert res["verdict"]["failures"] == [] and res["baseline_release"] == "5c1e"
    assert "within the limits against release 5c1e" in res["msg"]
    assert res["diff"]["before"] == "" and json.loads(res["diff"]["after"]) == json.loads(record.read_text())


@pytest.mark.parametrize(("change", "reason"), [
    ({"gpus": ["GPU-2"]}, "release 5c1e was measured on other GPUs (GPU-1, these GPU-2)"),
    ({"max_tokens": 5}, "release 5c1e was measured with another probe"),
])
def test_figures_of_other_gpus_or_another_probe_are_not_compared(tmp_path, change, reason):
    with sglang_stream(first=0.01, gap=0.01) as base:
        digest = probe(base, _check=True)[1]["probe"]["digest"]
        baseline = baseline_file(tmp_path, digest, ttft_ms=0.001, itl_ms=0.001, output_tokens_per_s=1e9)
        rc, res = probe(base, **dict({"release": "r4", "gpus": ["GPU-1"], "baseline": str(baseline)}, **change))
    assert rc == 0, res
    assert res["verdict"]["status"] == "not_comparable" and res["verdict"]["reason"].startswith(reason)
    assert res["verdict"]["checks"] == [] and res["recorded"] is False and res["changed"] is False


def test_check_mode_sends_nothing_and_says_what_it_would_do(tmp_path):
    seen = []
    baseline = baseline_file(tmp_path, "d" * 64)
    with sglang_stream(seen=seen) as base:
        rc, res = probe(base, _check=True, release="r5", baseline=str(baseline), record=str(tmp_path / "r5.json"))
    assert rc == 0 and seen == [] and not (tmp_path / "r5.json").exists()
    assert res["figures"] is None and res["verdict"] is None and res["changed"] is True
    assert res["msg"] == ("would send 1 warm-up and 3 timed requests of 4 tokens to http://127.0.0.1:%d/generate, "
                          "compare with release 5c1e, and record the figures in %s when they pass"
                          % (port_of(base), tmp_path / "r5.json"))


def test_the_key_from_an_option_or_the_env_file_is_never_shown(tmp_path):
    key = "sk-perf-secret-42"
    env = tmp_path / "m.env"
    env.write_text(f"SGLANG_API_KEY={key}\n")
    with sglang_stream(first=0.01, gap=0.01, key=key) as base:
        with_option = probe(base, api_key=key)
        with_file = probe(base, env_file=str(env))
        without = probe(base)
        both = probe(base, api_key=key, env_file=str(env))
    assert with_option[0] == 0 and with_file[0] == 0, (with_option, with_file)
    assert key not in json.dumps(with_option[1]) + json.dumps(with_file[1])
    assert without[0] == 1 and "answered 401" in without[1]["msg"]
    assert both[0] == 1 and "mutually exclusive" in both[1]["msg"]


def test_what_the_module_refuses_is_named(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{half")
    with sglang_stream() as base:
        rc, res = probe(base, baseline=str(broken))
        assert rc == 1 and res["msg"].startswith(f"the baseline {broken} is not a record of figures: not JSON")
        assert "remove it to promote without a comparison" in res["msg"]
        rc, res = probe(base, record=str(tmp_path / "r.json"))
        assert rc == 1 and "missing parameter(s) required by 'record': release" in res["msg"]
        rc, res = probe(base, release="r", record=str(tmp_path / "no" / "such" / "r.json"))
        assert rc == 1 and "the directory of" in res["msg"] and "does not exist" in res["msg"]
        rc, res = probe(base, max_tokens=1)
        assert rc == 1 and res["msg"] == "perf_probe: max_tokens must be at least 2 (one token after the first, " \
                                         "for the inter-token latency)"
    rc, res = probe(base)  # nothing listens there now: nothing is sent
    assert rc == 1 and res["msg"] == f"the performance probe could not measure {base}: nothing listens on {base[7:]}"
    unowned = {k: v for k, v in PROBE_OPTS.items() if k != "user"}
    rc, res = run_module("perf_probe", dict(unowned, port=port_of(base)))
    assert rc == 1 and "one of the following is required: unit, user" in res["msg"]
