"""router_workers as Ansible runs it (its own process, arguments on stdin) against a stand-in of the
router's worker API on 127.0.0.1 (tests/support/router_standin.py): the result's fields, check mode
reading only, the diff, one-line failures."""
from __future__ import annotations

import json
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


KEY = "rt3-control-plane-K3y"  # noqa: S105 - a test key


def _key_file(tmp_path, key=KEY):
    path = tmp_path / "qwen3-8b-dflash.env"
    path.write_text('SGLANG_ROUTER_CONTROL_PLANE_API_KEY="%s"\n' % key)
    path.chmod(0o640)
    return path


def test_a_router_with_a_control_plane_key_gets_it_from_the_file_and_refuses_calls_without_it(tmp_path):
    """Round 3, N5: the managed router answers 401 to a worker API call without its key; the module reads the
    key on the host from the router's env file (never a module option) and sends it as a bearer token."""
    key_file = _key_file(tmp_path)
    with router_standin() as (url, router):
        router.key = KEY
        old = router.register(A)
        rc, result = run_module("router_workers", {"url": url, "workers": [B], "state": "exact"})
        assert rc == 1 and result["msg"] == (
            "the router at %s answered 401 to GET /workers: Missing or invalid Authorization header" % url)
        assert list(router.workers) == [old] and router.refused == [("GET", "/workers")]
        (tmp_path / "wrong").mkdir()
        rc, wrong = run_module("router_workers", {"url": url, "workers": [B], "key_file": str(_key_file(
            tmp_path / "wrong", "not-the-key"))})
        assert rc == 1 and "answered 401" in wrong["msg"] and router.urls() == [A]
        router.refused.clear()
        rc, result = run_module("router_workers", {"url": url, "workers": [B], "state": "exact",
                                                   "key_file": str(key_file)})
        assert rc == 0, result
        assert result["added"] == [B] and result["removed"] == [A] and router.urls() == [B]
        assert router.refused == [] and {m for m, _p in router.requests} >= {"GET", "POST", "DELETE"}
        assert KEY not in json.dumps(result) and KEY not in json.dumps(wrong)


def test_a_key_file_that_is_missing_sends_no_key_and_one_that_is_a_link_or_empty_is_refused(tmp_path):
    with router_standin() as (url, router):
        rc, result = run_module("router_workers", {"url": url, "workers": [A],
                                                   "key_file": str(tmp_path / "absent.env")})
        assert rc == 0 and router.urls() == [A]  # a router deployed before it had a key: no key to send
        link = tmp_path / "link.env"
        link.symlink_to(_key_file(tmp_path))
        rc, result = run_module("router_workers", {"url": url, "workers": [B], "key_file": str(link)})
        assert rc == 1 and result["msg"].startswith("cannot read the router's key file %s: " % link)
        empty = tmp_path / "empty.env"
        empty.write_text("OTHER=1\n")
        rc, result = run_module("router_workers", {"url": url, "workers": [B], "key_file": str(empty)})
        assert rc == 1 and result["msg"] == (
            "the router's key file %s holds no SGLANG_ROUTER_CONTROL_PLANE_API_KEY" % empty)
        assert router.urls() == [A]
