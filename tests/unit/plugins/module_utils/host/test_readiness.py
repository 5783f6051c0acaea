"""host/readiness.py: the API key comes from the instance's env file, read by systemd's
EnvironmentFile rules; probes back off to the interval; the unit's restarts and failure end the
wait; a healthy server is ready only when /v1/models names the model. The loop runs here with
a fake clock, fake probes and a fake unit; tests/unit/plugins/modules/test_instance_ready.py
runs the module against a real HTTP server on loopback."""
from __future__ import annotations

import itertools
import json

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import readiness as R


@pytest.mark.parametrize(("text", "expected"), [
    ("A=1\nB=two words\n", {"A": "1", "B": "two words"}),
    ("  A  =   padded value \t\n", {"A": "padded value"}),              # outer whitespace dropped
    ('A="quoted # not a comment"\n', {"A": "quoted # not a comment"}),
    ("A='single \\n $x \"'\n", {"A": 'single \\n $x "'}),               # verbatim
    ('A="a\\"b\\\\c\\$d\\`e\\zf"\n', {"A": 'a"b\\c$d`e\\zf'}),        # \" \\ \$ \` kept, \z stays \z
    ("A=un\\quoted\\ x\n", {"A": "unquoted x"}),                        # backslash keeps the next char
    ("A=one\\\ntwo\n", {"A": "onetwo"}),                                # continuation
    ('A="multi\nline"\n', {"A": "multi\nline"}),
    ("A=it's \"kept\"\n", {"A": "it's \"kept\""}),                     # quotes after the first char are text
    ("# comment\n; comment\nnot an assignment\n\nA=1", {"A": "1"}),
    ("A=1\nA=2\n", {"A": "2"}),                                         # the last one wins
    ('A=""\nB=\n', {"A": "", "B": ""}),
    ('A="x" "y"\n', {"A": "xy"}),                                       # adjacent parts join
])
def test_env_file_values_as_systemd_reads_them(text, expected):
    assert R.parse_env_file(text) == expected


def test_the_key_is_read_from_the_env_file(tmp_path):
    env = tmp_path / "qwen3-8b.env"
    env.write_text('CUDA_VISIBLE_DEVICES=1\nSGLANG_API_KEY="sk-a\\"b c"\nSGLANG_PORT=30001\n')
    assert R.api_key(str(env)) == 'sk-a"b c'
    assert R.api_key(str(tmp_path / "missing.env")) == ""
    assert R.api_key("") == ""
    assert R.api_key(None) == ""
    assert R.api_key(str(tmp_path)) == ""  # a directory is no env file


@pytest.mark.parametrize(("interval", "expected"), [
    (5, [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]),     # the default: quick at first, then every 5 s
    (1, [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),
    (0.2, [0.2] * 6),                       # an interval below the first wait is the wait
    (0, [0.0] * 6),
])
def test_probes_start_quick_and_slow_down_to_the_interval(interval, expected):
    assert list(itertools.islice(R.waits(interval), len(expected))) == expected


def test_unit_state_as_systemctl_show_prints_it():
    assert R.parse_unit_state("NRestarts=2\nActiveState=activating\nMainPID=0\nSubState=auto-restart\n\nodd") == {
        "NRestarts": "2", "ActiveState": "activating", "MainPID": "0", "SubState": "auto-restart"}
    assert R.restart_count({"NRestarts": "3"}) == 3
    assert R.restart_count({"NRestarts": ""}) == 0 and R.restart_count({}) == 0
    assert R.restart_count({"NRestarts": "[not set]"}) == 0


def test_the_unit_s_state_comes_from_systemctl_show_or_is_unknown(monkeypatch):
    seen = []

    def answer(rc, out="", timed_out=False):
        def run(argv, timeout):
            seen.append((argv, timeout))
            return rc, out, "", timed_out
        return run

    monkeypatch.setattr(R, "find_program", lambda name: "/usr/bin/" + name)  # by absolute path, never by name
    monkeypatch.setattr(R, "run_with_timeout", answer(0, "NRestarts=1\nActiveState=active\n"))
    assert R.unit_state("sglang-dflash@a.service") == {"NRestarts": "1", "ActiveState": "active"}
    assert seen == [(["/usr/bin/systemctl", "show", "-p", "NRestarts", "-p", "ActiveState", "-p", "MainPID",
                      "-p", "SubState", "sglang-dflash@a.service"], R.SYSTEMCTL_TIMEOUT)]
    monkeypatch.setattr(R, "run_with_timeout", answer(None, ""))  # no systemctl
    assert R.unit_state("sglang-dflash@a.service") == {}
    monkeypatch.setattr(R, "run_with_timeout", answer(-9, "NRestarts=1\n", timed_out=True))  # no answer in time
    assert R.unit_state("sglang-dflash@a.service") == {}
    monkeypatch.setattr(R, "find_program", lambda name: None)  # none only root can change: nothing runs
    seen.clear()
    assert R.unit_state("sglang-dflash@a.service") == {} and seen == []


@pytest.mark.parametrize(("state", "before", "allowed", "expected"), [
    ({"NRestarts": "4", "ActiveState": "active", "SubState": "running"}, 4, 0, (0, None)),
    ({"NRestarts": "5", "ActiveState": "active", "SubState": "running"}, 4, 0,
     (1, "the unit restarted 1 times while starting (crash loop)")),
    ({"NRestarts": "5", "ActiveState": "active", "SubState": "running"}, 4, 1, (1, None)),
    # waiting RestartSec to start again: one more restart already
    ({"NRestarts": "4", "ActiveState": "activating", "SubState": "auto-restart"}, 4, 0,
     (1, "the unit restarted 1 times while starting (crash loop)")),
    ({"NRestarts": "0", "ActiveState": "failed", "SubState": "failed"}, 0, 0, (0, "the unit failed")),
    ({}, 0, 0, (0, None)),                                           # no systemctl: HTTP decides
])
def test_restarts_and_failure_end_the_wait(state, before, allowed, expected):
    assert R.unit_verdict(state, before, allowed) == expected


@pytest.mark.parametrize(("body", "expected"), [
    ('{"object": "list", "data": [{"id": "m"}, {"id": "n"}]}', ("m", "n")),
    ('{"data": []}', ()),
    ("", ()),
    ("not json", ()),
    ("[1, 2]", ()),
    ('{"data": [1]}', ()),
])
def test_models_named_by_v1_models(body, expected):
    assert R.parse_models(body) == expected


def test_the_model_must_be_named():
    assert R.models_reason("m", ("m",)) is None
    assert R.models_reason("qwen3-8b-dflash", ("other",)) == "/v1/models answers ['other'], not naming qwen3-8b-dflash"
    assert R.models_reason("m", ()) == "/v1/models answers [], not naming m"


def test_reasons_read_as_before():
    assert R.health_reason(503, "") == "/health_generate answered 503"
    assert R.health_reason(None, "[Errno 111] Connection refused") == \
        "/health_generate answered nothing: [Errno 111] Connection refused"
    assert R.timed_out(10.0, "x") == "not ready within 10s: x"   # an int timeout reads as the operator wrote it
    assert R.timed_out(1, "x") == "not ready within 1s: x"
    assert R.timed_out(2.5, "x") == "not ready within 2.5s: x"


class Host:
    """A fake clock, sleep, unit and server: ``answers`` are (health status, models body) per
    probe round (the last one repeats); ``units`` the unit's state per read (the last repeats)."""

    def __init__(self, answers, units=({},)):
        self.now = 100.0
        self.answers = list(answers)
        self.units = list(units)
        self.slept = []
        self.asked = []
        self.round = -1

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds

    def read_unit(self, unit):
        assert unit == "u.service"
        return self.units.pop(0) if len(self.units) > 1 else self.units[0]

    def probe(self, url, key, seconds):
        assert R.MIN_PROBE <= seconds <= R.PROBE_TIMEOUT
        self.asked.append((url, key))
        if url.endswith("/health_generate"):
            self.round += 1
            status = self.answers[min(self.round, len(self.answers) - 1)][0]
            return status, "" if status is not None else "[Errno 111] Connection refused"
        assert url.endswith("/v1/models")
        return 200, self.answers[min(self.round, len(self.answers) - 1)][1]

    def wait(self, model="m", timeout=10, interval=5, max_restarts=0, env_file=None):
        return R.wait_ready("http://127.0.0.1:30001", model, "u.service", timeout, interval, max_restarts=max_restarts,
                            env_file=env_file, probe=self.probe, read_unit=self.read_unit, clock=self.clock,
                            sleep=self.sleep)


MODELS_M = json.dumps({"data": [{"id": "m"}]})


def test_ready_after_a_slow_start_probed_quick_then_every_interval():
    host = Host([(None, None)] * 2 + [(503, None)] * 4 + [(200, MODELS_M)])
    answer = host.wait(timeout=60, interval=5)
    assert answer == R.Readiness(ready=True, health=200, models=("m",), restarts=0, reason=None, seconds=17.5)
    assert host.slept == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert answer.as_dict() == {"ready": True, "health": 200, "models": ["m"], "restarts": 0, "reason": None,
                                "seconds": 17.5}
    assert host.asked[0] == ("http://127.0.0.1:30001/health_generate", "")
    assert host.asked[-1] == ("http://127.0.0.1:30001/v1/models", "")


def test_a_healthy_server_serving_another_model_times_out_naming_both():
    host = Host([(200, json.dumps({"data": [{"id": "other"}]}))])
    answer = host.wait(model="qwen3-8b-dflash", timeout=1, interval=0.2)
    assert answer.ready is False and answer.models == ("other",) and answer.health == 200
    assert answer.reason == "not ready within 1s: /v1/models answers ['other'], not naming qwen3-8b-dflash"


def test_nothing_answering_times_out_with_the_last_answer():
    host = Host([(None, None)])
    answer = host.wait(timeout=10, interval=5)
    assert answer.ready is False and answer.health is None and answer.models == ()
    assert answer.reason == "not ready within 10s: /health_generate answered nothing: [Errno 111] Connection refused"
    assert host.slept == [0.5, 1.0, 2.0, 4.0, 5.0]  # 12.5 s spent at the sixth probe, the last
    assert answer.seconds == 12.5


def test_a_crash_loop_ends_the_wait_before_the_timeout():
    running = {"NRestarts": "2", "ActiveState": "activating", "SubState": "start"}
    again = {"NRestarts": "2", "ActiveState": "activating", "SubState": "auto-restart"}
    host = Host([(None, None)], units=[running, running, running, again])
    answer = host.wait(timeout=1200, interval=5)
    assert answer.ready is False and answer.restarts == 1
    assert answer.reason == "the unit restarted 1 times while starting (crash loop)"
    assert answer.seconds == 1.5 and len([u for u, _k in host.asked if u.endswith("/health_generate")]) == 2


def test_restarts_within_max_restarts_are_waited_through():
    states = [{"NRestarts": "0"}, {"NRestarts": "0"}, {"NRestarts": "1"}, {"NRestarts": "1"}]
    host = Host([(None, None), (None, None), (200, MODELS_M)], units=states)
    answer = host.wait(timeout=60, interval=5, max_restarts=1)
    assert answer.ready is True and answer.restarts == 1


def test_a_failed_unit_ends_the_wait_at_once():
    host = Host([(None, None)], units=[{"ActiveState": "activating"}, {"ActiveState": "failed"}])
    answer = host.wait()
    assert answer == R.Readiness(ready=False, health=None, models=(), restarts=0, reason="the unit failed",
                                 seconds=0.0)
    assert host.asked == []


def test_the_probes_carry_the_env_files_key(tmp_path):
    env = tmp_path / "m.env"
    env.write_text('SGLANG_API_KEY="sk-secret-1234"\n')
    host = Host([(200, MODELS_M)])
    assert host.wait(env_file=str(env)).ready is True
    assert {key for _url, key in host.asked} == {"sk-secret-1234"}


# Round 3, M1 and m3: each probe has an overall deadline and a size bound, and only http(s).

def _timed(call):
    import time

    start = time.monotonic()
    out = call()
    return out, time.monotonic() - start


@pytest.mark.parametrize("head", [False, True])
def test_a_dripping_answer_fails_the_probe_at_its_deadline(head):
    """200 with a 10 MB Content-Length then one byte every 2 s (or the status line dripped): the probe ends
    at its deadline, not at the server's pace, and says so."""
    from drip_server import drip_server

    with drip_server(gap=0.2 if head else 2.0, head=head) as (base, server):
        (status, body), seconds = _timed(lambda: R.get(base + "/health_generate", "", timeout=1, limit=100 << 20))
    assert status is None and body == "no complete answer within 1s (the deadline of the whole exchange)"
    assert 0.9 <= seconds < 3 and server.served == 1


def test_an_answer_over_the_bound_is_refused():
    from drip_server import drip_server

    with drip_server(gap=0.01, length=2 << 20) as (base, _server):
        (status, body), seconds = _timed(lambda: R.get(base + "/v1/models", "", timeout=5))
    assert status is None and seconds < 1
    assert body == f"GET {base}/v1/models answered 200 with 2097152 bytes, more than the 1048576 read here"


def test_probe_seconds_are_the_time_left_within_bounds():
    assert R.probe_seconds(1200, 0) == R.PROBE_TIMEOUT and R.probe_seconds(10, 7.5) == 2.5
    assert R.probe_seconds(10, 10) == R.MIN_PROBE and R.probe_seconds(0, 3) == R.MIN_PROBE


def test_the_wait_ends_within_its_timeout_against_a_dripping_server():
    """instance_ready timeout=10 against the dripping server ran for ever; each probe now has the time left."""
    from drip_server import drip_server

    with drip_server(length=1000) as (base, _server):  # within the size bound: the deadline ends it
        answer, seconds = _timed(lambda: R.wait_ready(
            base, "m", "u.service", timeout=1, interval=0.1, read_unit=lambda unit: {},
            probe=R.get))
    assert not answer.ready and seconds < 4
    assert answer.reason == "not ready within 1s: /health_generate answered nothing: no complete answer within 1s " \
                            "(the deadline of the whole exchange)"


@pytest.mark.parametrize("base", ["file:///{secret}#", "ftp://127.0.0.1/x", "/{secret}", "http://"])
def test_a_base_that_is_not_http_is_refused_and_reads_nothing(tmp_path, base):
    """m3: instance_ready base=file:///etc/shadow# returned the file in its reason."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE\n")
    base = base.format(secret=str(secret).lstrip("/"))
    probed = []
    answer = R.wait_ready(base, "m", "u.service", timeout=5, interval=1, read_unit=lambda unit: {},
                          probe=lambda url, key, seconds: probed.append(url) or (200, ""))
    assert not answer.ready and answer.reason == f"base {base} is not an http:// or https:// URL" and probed == []
    status, body = R.get(base + "/health_generate", "")
    assert status is None and "TOP-SECRET" not in body and "is not an http:// or https:// URL" in body
    from ansible_collections.dflash.deploy.plugins.module_utils.converged import observe as O

    assert O.health(base, "m", "", 5) == f"base {base} is not an http:// or https:// URL"
