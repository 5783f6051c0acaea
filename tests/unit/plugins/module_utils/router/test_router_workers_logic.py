"""router/: the worker URLs compared in one form, the plan for each state, the prediction, ``changed`` and
the diff (pure), then ``client`` and ``sync.converge`` against a stand-in of the router's worker API on
127.0.0.1 in this process (tests/support/router_standin.py)."""
from __future__ import annotations

import socket

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.router import client as C
from ansible_collections.dflash.deploy.plugins.module_utils.router import sync as S
from ansible_collections.dflash.deploy.plugins.module_utils.router import workers as W
from router_standin import router_standin

A, B, D = "http://127.0.0.1:30001", "http://127.0.0.1:30002", "http://127.0.0.1:30003"


def test_urls_in_one_form():
    assert W.normalize_url(" HTTP://Host.Example:30001/ ") == "http://host.example:30001"
    assert W.normalize_url("https://192.0.2.10") == "https://192.0.2.10"
    assert W.normalize_url("http://[::1]:8000/") == "http://[::1]:8000"
    for bad in ("127.0.0.1:30001", "grpc://h:1", "http://h:1/generate", "http://u:p@h:1", "http://h:1?x=1",
                "http://h:port", "", None, 5):
        with pytest.raises(ValueError):
            W.normalize_url(bad)
    assert W.wanted_urls([A, A + "/", B, "HTTP://127.0.0.1:30001"]) == [A, B]


def test_parse_the_router_listing():
    listed = W.parse_workers({"workers": [{"id": "u1", "url": A, "model_id": "qwen3-8b", "is_healthy": False}],
                              "total": 1})
    assert listed == [W.Worker(url=A, id="u1", healthy=False, model="qwen3-8b")]
    for bad in ({}, {"workers": None}, {"workers": [{"url": A}]}, [], {"workers": ["x"]}):
        with pytest.raises(ValueError):
            W.parse_workers(bad)


def workers(*pairs):
    return [W.Worker(url=u, id=i) for i, u in pairs]


def test_present_adds_what_is_missing_and_leaves_the_rest():
    current = workers(("1", A), ("2", D))
    assert W.plan(current, [A, B], "present") == W.Plan(add=(B,))
    assert W.plan(current, [A], "present").empty
    assert W.plan(workers(("1", A + "/")), [A], "present").empty


def test_exact_removes_others_and_second_registrations_keeping_the_plain_spelling():
    current = workers(("1", A + "/"), ("2", D), ("3", A), ("4", "not a url"))
    p = W.plan(current, [A, B], "exact")
    assert p.add == (B,) and [w.id for w in p.remove] == ["1", "2", "4"]
    assert W.plan(workers(("1", A + "/")), [A], "exact").empty  # the one registration, spelled otherwise, stays
    assert [w.id for w in W.plan(current, [], "exact").remove] == ["1", "2", "3", "4"]


def test_absent_removes_every_registration_of_the_named_ones():
    current = workers(("1", A), ("2", A + "/"), ("3", B))
    assert [w.id for w in W.plan(current, [A, D], "absent").remove] == ["1", "2"]
    with pytest.raises(ValueError):
        W.plan(current, [A], "latest")


def test_prediction_changed_and_diff():
    before = workers(("1", A), ("2", D))
    after = W.predicted(before, W.plan(before, [A, B], "exact"))
    assert after == [W.Worker(url=A, id="1"), W.Worker(url=B)]
    assert W.changed(before, after) and not W.changed(before, list(reversed(before)))
    assert W.changed(workers(("1", A)), workers(("9", A)))  # the same URL registered again
    assert W.diff("http://r:1", before, after) == {"before": A + "\n" + D + "\n", "after": A + "\n" + B + "\n",
                                                   "before_header": "http://r:1/workers",
                                                   "after_header": "http://r:1/workers"}


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_client_speaks_the_worker_api():
    # the addition stays queued for a second: a loaded machine still asks while it is "processing"
    with router_standin(delay=1.0) as (url, router):
        wid = C.add_worker(url, A)
        assert C.job_status(url, wid)[0] == "processing"
        result = S.converge(url, [A], "present", timeout=5)  # A registered by the POST above, or waited for
        assert [w["url"] for w in result["after"]] == [A]
        assert C.list_workers(url)["total"] == 1
        assert C.remove_worker(url, "00000000-0000-0000-0000-000000000000", A) is False
        assert C.job_status(url, "00000000-0000-0000-0000-000000000000") == (None, None)
    with pytest.raises(C.RouterError, match=r"^the router at http://127.0.0.1:\d+ does not answer GET /workers: "):
        C.list_workers("http://127.0.0.1:%d" % closed_port(), timeout=2)


def test_converge_exact_adds_first_then_removes_and_reads_again():
    with router_standin() as (url, router):
        old = router.register(A)
        result = S.converge(url, [B + "/"], "exact", timeout=10)
        assert result["added"] == [B] and result["removed"] == [A] and result["changed"]
        assert [w["id"] for w in result["before"]] == [old]
        assert [w["url"] for w in result["after"]] == [B] and result["after"][0]["id"] and router.urls() == [B]
        sent = [r for r in router.requests if r[0] != "GET"]
        assert sent[0] == ("POST", "/workers") and sent[1] == ("DELETE", "/workers/" + old)
        again = S.converge(url, [B], "exact", timeout=10)
        assert not again["changed"] and again["added"] == again["removed"] == []


def test_check_mode_only_reads():
    with router_standin() as (url, router):
        router.register(A)
        result = S.converge(url, [B], "exact", timeout=5, check_mode=True)
        assert result["changed"] and [w["url"] for w in result["after"]] == [B] and result["after"][0]["id"] is None
        assert {m for m, _path in router.requests} == {"GET"} and router.urls() == [A]


def test_an_unhealthy_worker_counts_as_registered():
    with router_standin() as (url, router):
        router.register(A)
        router.unhealthy.add(A)
        result = S.converge(url, [A], "present", timeout=5)
        assert not result["changed"] and result["after"][0]["healthy"] is False


def test_a_refused_addition_removes_nothing_and_names_the_worker():
    with router_standin() as (url, router):
        router.register(A)
        router.refuse.add(B)
        with pytest.raises(C.RouterError, match=r"refused worker http://127.0.0.1:30002: Workflow failed at step "
                                                r"detect_connection_mode: Both HTTP and gRPC health checks failed"):
            S.converge(url, [B], "exact", timeout=10)
        assert router.urls() == [A] and not any(m == "DELETE" for m, _path in router.requests)


def test_an_addition_that_never_registers_fails_after_the_timeout():
    with router_standin() as (url, router):
        router.hang.add(B)
        with pytest.raises(C.RouterError, match=r"did not apply the change within 1s: worker http://127.0.0.1:30002 "
                                                r"not registered \(its job: processing\)$"):
            S.converge(url, [B], "present", timeout=1)


def test_a_router_that_refuses_requests():
    with router_standin() as (url, router):
        router.status = 503
        with pytest.raises(C.RouterError, match=r"answered 503 to GET /workers: stand-in answers 503$"):
            S.converge(url, [A], "present", timeout=5)
    with router_standin() as (url, router):
        real_add = C.add_worker
        router.status = None
        with pytest.raises(C.RouterError, match=r"refused worker http://127.0.0.1:30001: 503"):
            class Api:
                list_workers = staticmethod(C.list_workers)
                job_status = staticmethod(C.job_status)
                remove_worker = staticmethod(C.remove_worker)

                @staticmethod
                def add_worker(base, u, timeout):
                    router.status = 503
                    return real_add(base, u, timeout=timeout)
            S.converge(url, [A], "present", timeout=5, api=Api)


def test_a_removed_worker_already_gone_is_no_error():
    with router_standin(delay=0.5) as (url, router):
        wid = router.register(A)
        assert C.remove_worker(url, wid, A) is True
        result = S.converge(url, [], "exact", timeout=5)  # the first DELETE still queued: sent again, then waited for
        assert router.urls() == [] and result["after"] == []


def test_bad_options_are_value_errors():
    with router_standin() as (url, router):
        with pytest.raises(ValueError, match="is not an http"):
            S.converge(url, ["127.0.0.1:30001"], "present")
        with pytest.raises(ValueError, match="is not an http"):
            S.converge("127.0.0.1:30000", [A], "present")
