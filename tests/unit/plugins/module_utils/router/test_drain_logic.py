"""router/drain.py: a load report read (SGLang's /v1/loads), what is in flight, the decision drained / wait /
timed out (pure), the wait with a fake clock, then ``drain`` against stand-ins of the router's worker API and
of the instance's /v1/loads on 127.0.0.1 (tests/support)."""
from __future__ import annotations

import json
import socket

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.router import client as C
from ansible_collections.dflash.deploy.plugins.module_utils.router import drain as D
from loads_standin import loads_standin
from router_standin import router_standin


def loads(running, waiting=None, **extra):
    aggregate = {"total_running_reqs": running, **({} if waiting is None else {"total_waiting_reqs": waiting})}
    return json.dumps({"loads": [{"dp_rank": 0, "num_running_reqs": running}], "aggregate": aggregate, **extra})


def test_parse_the_load_report():
    assert D.parse_loads(loads(3, 1)) == (3, 1)
    assert D.parse_loads(loads(0)) == (0, None)
    assert D.parse_loads(json.dumps({"aggregate": {"total_running_reqs": 0, "total_waiting_reqs": "x"}})) == (0, None)
    for bad, why in (("<html>", "not JSON"), ("[]", "no object 'aggregate'"), ("{}", "no object 'aggregate'"),
                     (json.dumps({"aggregate": {}}), "no count aggregate.total_running_reqs"),
                     (json.dumps({"aggregate": {"total_running_reqs": True}}), "no count"),
                     (json.dumps({"aggregate": {"total_running_reqs": -1}}), "no count"),
                     (json.dumps({"aggregate": {"total_running_reqs": 1.5}}), "no count"), (None, "not JSON")):
        with pytest.raises(ValueError, match=why):
            D.parse_loads(bad)


def test_in_flight_counts_running_and_waiting_and_no_answer_as_none():
    assert D.in_flight(200, loads(2, 3)) == (5, None)
    assert D.in_flight(200, loads(0, 0)) == (0, None)
    assert D.in_flight(200, loads(0, 1)) == (1, None)  # a queued request dies with the restart too
    assert D.in_flight(None, "Connection refused") == (0, None)  # not answering: it serves nothing
    assert D.in_flight(404, "") == (None, "GET /v1/loads answered 404")
    assert D.in_flight(401, "") == (None, "GET /v1/loads answered 401")
    assert D.in_flight(200, "{}") == (None, "GET /v1/loads: the answer has no object 'aggregate'")


def test_decide():
    assert D.decide(0, 0.0, 120) == D.DRAINED
    assert D.decide(0, 500.0, 120) == D.DRAINED
    assert D.decide(1, 119.9, 120) == D.WAIT
    assert D.decide(1, 120.0, 120) == D.TIMED_OUT
    assert D.decide(None, 10.0, 120) == D.WAIT  # not known is not drained
    assert D.decide(None, 120.0, 120) == D.TIMED_OUT


class Clock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def scripted(answers, calls=None):
    answers = list(answers)

    def probe(worker, key):
        if calls is not None:
            calls.append((worker, key))
        return answers.pop(0) if len(answers) > 1 else answers[0]
    return probe


def test_wait_until_nothing_is_in_flight():
    clock, calls = Clock(), []
    out = D.wait_drained("http://127.0.0.1:30001", 120, 2, key="k", clock=clock, sleep=clock.sleep,
                         probe=scripted([(200, loads(2)), (200, loads(1)), (200, loads(0))], calls))
    assert out == {"drained": True, "timed_out": False, "seconds": 4.0, "in_flight": 0, "answered": True,
                   "reason": None}
    assert clock.sleeps == [2, 2] and calls == [("http://127.0.0.1:30001", "k")] * 3


def test_the_wait_is_bounded_and_says_what_is_still_in_flight():
    clock = Clock()
    out = D.wait_drained("http://w:1", 5, 2, clock=clock, sleep=clock.sleep, probe=scripted([(200, loads(3, 1))]))
    assert out == {"drained": False, "timed_out": True, "seconds": 5.0, "in_flight": 4, "answered": True,
                   "reason": None}
    assert clock.sleeps == [2, 2, 1]  # the last sleep ends at the bound, not after it


def test_an_instance_that_stops_answering_is_drained_and_one_without_the_endpoint_waits_to_the_bound():
    clock = Clock()
    out = D.wait_drained("http://w:1", 10, 1, clock=clock, sleep=clock.sleep,
                         probe=scripted([(200, loads(1)), (None, "Connection refused")]))
    assert out["drained"] and out["in_flight"] == 0 and not out["answered"] and out["seconds"] == 1.0
    clock = Clock()
    out = D.wait_drained("http://w:1", 3, 1, clock=clock, sleep=clock.sleep, probe=scripted([(404, "")]))
    assert out == {"drained": False, "timed_out": True, "seconds": 3.0, "in_flight": None, "answered": True,
                   "reason": "GET /v1/loads answered 404"}


def test_drain_removes_the_worker_then_waits_for_its_requests():
    with router_standin() as (url, router), loads_standin() as (worker, instance):
        other = router.register("http://127.0.0.1:30002")
        router.register(worker + "/")  # registered in another spelling: the same server
        instance.running = [2, 1, 0]
        instance.key = "sekret"
        out = D.drain(url, worker, timeout=30, interval=0.05, key="sekret")
        assert out["registered"] and out["removed"] and out["changed"] and out["router_answered"]
        assert out["drained"] and not out["timed_out"] and out["in_flight"] == 0 and out["reason"] is None
        assert 0.0 <= out["seconds"] < 30 and out["worker"] == worker
        assert router.urls() == ["http://127.0.0.1:30002"] and list(router.workers) == [other]
        assert [p for p, _auth in instance.requests] == ["/v1/loads"] * 3
        assert {auth for _p, auth in instance.requests} == {"Bearer sekret"}


def test_drain_leaves_a_worker_the_router_does_not_have_but_waits_for_its_requests_and_check_mode_only_reads():
    with router_standin() as (url, router), loads_standin() as (worker, instance):
        router.register("http://127.0.0.1:30002")
        instance.running = [1, 0]  # sent before someone else removed it
        out = D.drain(url, worker, timeout=30, interval=0.05)
        assert not out["registered"] and not out["removed"] and not out["changed"]
        assert out["drained"] and out["in_flight"] == 0 and out["seconds"] < 30
        assert [p for p, _auth in instance.requests] == ["/v1/loads"] * 2
        assert router.urls() == ["http://127.0.0.1:30002"]
        instance.requests.clear()
        router.register(worker)
        router.requests.clear()
        out = D.drain(url, worker, timeout=30, interval=0.05, check_mode=True)
        assert out["registered"] and out["changed"] and not out["removed"] and not out["drained"]
        assert {m for m, _path in router.requests} == {"GET"} and instance.requests == []
        assert len(router.urls()) == 2


def test_a_router_that_does_not_answer_routes_nothing_and_one_that_refuses_fails():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % s.getsockname()[1]
    out = D.drain(closed, "http://127.0.0.1:30001", timeout=30, interval=0.05)
    assert not out["router_answered"] and not out["registered"] and not out["changed"]
    assert out["reason"].startswith("the router at %s does not answer GET /workers: " % closed)
    with router_standin() as (url, router):
        router.register("http://127.0.0.1:30001")
        real_remove = C.remove_worker

        class Refusing:
            list_workers = staticmethod(C.list_workers)
            job_status = staticmethod(C.job_status)
            add_worker = staticmethod(C.add_worker)

            @staticmethod
            def remove_worker(router_url, wid, worker_url, timeout=10.0, opener=None):
                router.status = 500
                try:
                    return real_remove(router_url, wid, worker_url, timeout=timeout)
                finally:
                    router.status = None
        with pytest.raises(C.RouterError, match="refused to remove worker http://127.0.0.1:30001"):
            D.drain(url, "http://127.0.0.1:30001", timeout=30, interval=0.05, api=Refusing)
    with pytest.raises(ValueError):
        D.drain("127.0.0.1:30000", "http://127.0.0.1:30001", timeout=30, interval=1)


def test_a_router_that_answers_with_an_error_is_no_router_that_does_not_answer():
    with router_standin() as (url, router):
        router.status = 500
        with pytest.raises(C.RouterError, match="answered 500 to GET /workers") as caught:
            D.drain(url, "http://127.0.0.1:30001", timeout=30, interval=0.05)
        assert not isinstance(caught.value, C.RouterUnreachable)
