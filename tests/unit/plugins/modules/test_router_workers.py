"""router_workers as Ansible runs it (its own process, arguments on stdin) against a stand-in of the
router's worker API on 127.0.0.1 (tests/support/router_standin.py): the result's fields, check mode
reading only, the diff, one-line failures."""
from __future__ import annotations

import socket

from module_runner import run_module
from router_standin import router_standin

A, B = "http://127.0.0.1:30001", "http://127.0.0.1:30002"


def test_exact_swaps_a_worker_and_a_rerun_changes_nothing():
    with router_standin() as (url, router):
        old = router.register(A)
        rc, result = run_module("router_workers", {"url": url + "/", "workers": [B], "state": "exact"}, diff=True)
        assert rc == 0, result
        assert result["changed"] and result["added"] == [B] and result["removed"] == [A]
        assert result["before"] == [{"url": A, "id": old, "healthy": True, "model": "qwen3-8b"}]
        assert [w["url"] for w in result["after"]] == [B] and router.urls() == [B]
        assert result["diff"] == {"before": A + "\n", "after": B + "\n", "before_header": url + "/workers",
                                  "after_header": url + "/workers"}
        rc, again = run_module("router_workers", {"url": url, "workers": [B], "state": "exact"})
        assert rc == 0 and not again["changed"] and again["after"] == result["after"]


def test_check_mode_reports_the_change_and_sends_none():
    with router_standin() as (url, router):
        router.register(A)
        rc, result = run_module("router_workers", {"url": url, "workers": [A], "state": "absent"}, check=True)
        assert rc == 0 and result["changed"] and result["removed"] == [A] and result["after"] == []
        assert router.urls() == [A] and {m for m, _path in router.requests} == {"GET"}


def test_failures_are_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % s.getsockname()[1]
    rc, result = run_module("router_workers", {"url": closed, "workers": [A]})
    assert rc == 1 and result["failed"] and "\n" not in result["msg"]
    assert result["msg"].startswith("the router at %s does not answer GET /workers: " % closed)
    with router_standin() as (url, router):
        router.refuse.add(B)
        rc, result = run_module("router_workers", {"url": url, "workers": [B], "timeout": 10})
        assert rc == 1 and "\n" not in result["msg"]
        assert result["msg"].startswith("the router at %s refused worker %s: Workflow failed" % (url, B))
        rc, result = run_module("router_workers", {"url": url, "workers": ["127.0.0.1:30001"]})
        assert rc == 1 and result["msg"] == "'127.0.0.1:30001' is not an http:// or https:// URL with a host"
        rc, result = run_module("router_workers", {"url": url, "workers": [A], "timeout": 0})
        assert rc == 1 and result["msg"] == "timeout must be more than 0 seconds, not 0.0"
