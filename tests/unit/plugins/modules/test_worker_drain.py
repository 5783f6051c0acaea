"""worker_drain as Ansible runs it (its own process, arguments on stdin) against stand-ins of the router's
worker API and of the instance's /v1/loads on 127.0.0.1 (tests/support): the worker taken out, the wait
for its requests with the key from the instance's env file, the bound, check mode reading only, one-line
failures."""
from __future__ import annotations

from loads_standin import loads_standin
from module_runner import run_module
from router_standin import router_standin


def test_the_worker_leaves_the_router_and_the_wait_ends_when_nothing_runs(tmp_path):
    env = tmp_path / "q1.env"
    env.write_text("SGLANG_API_KEY=sekret\n")
    with router_standin() as (url, router), loads_standin() as (worker, instance):
        router.register(worker)
        keep = router.register("http://127.0.0.1:30002")
        instance.key = "sekret"
        instance.running = [1, 1, 0]
        rc, result = run_module("worker_drain", {"url": url, "worker": worker + "/", "interval": 0.1,
                                                 "env_file": str(env)})
        assert rc == 0, result
        assert result["changed"] and result["registered"] and result["removed"] and result["drained"]
        assert not result["timed_out"] and result["in_flight"] == 0 and result["worker"] == worker
        assert list(router.workers) == [keep] and len(instance.requests) == 3
        assert "sekret" not in str(result)
        instance.running = 0
        rc, again = run_module("worker_drain", {"url": url, "worker": worker, "timeout": 5, "env_file": str(env)})
        assert rc == 0 and not again["changed"] and not again["registered"] and not again["removed"]
        assert again["drained"]  # not listed: not removed, its requests still waited for (none here)


def test_the_bound_is_no_failure_and_says_what_is_in_flight():
    with router_standin() as (url, router), loads_standin() as (worker, instance):
        router.register(worker)
        instance.running = 2
        rc, result = run_module("worker_drain", {"url": url, "worker": worker, "timeout": 0.5, "interval": 0.1})
        assert rc == 0, result
        assert result["removed"] and not result["drained"] and result["timed_out"] and result["in_flight"] == 2
        assert router.urls() == []
        router.register(worker)
        instance.status = 404  # a server without /v1/loads
        rc, result = run_module("worker_drain", {"url": url, "worker": worker, "timeout": 0.3, "interval": 0.1})
        assert rc == 0 and result["timed_out"] and result["in_flight"] is None
        assert result["reason"] == "GET /v1/loads answered 404"


def test_check_mode_reads_only():
    with router_standin() as (url, router), loads_standin() as (worker, instance):
        router.register(worker)
        rc, result = run_module("worker_drain", {"url": url, "worker": worker}, check=True)
        assert rc == 0 and result["changed"] and result["registered"] and not result["removed"]
        assert router.urls() == [worker] and {m for m, _p in router.requests} == {"GET"}
        assert instance.requests == []


def test_failures_are_one_line():
    with router_standin() as (url, router):
        router.register("http://127.0.0.1:30001")
        rc, result = run_module("worker_drain", {"url": url, "worker": "127.0.0.1:30001"})
        assert rc == 1 and result["msg"] == "'127.0.0.1:30001' is not an http:// or https:// URL with a host"
        rc, result = run_module("worker_drain", {"url": url, "worker": "http://127.0.0.1:30001", "timeout": 0})
        assert rc == 1 and result["msg"] == "timeout must be more than 0 seconds, not 0.0"
        rc, result = run_module("worker_drain", {"url": url, "worker": "http://127.0.0.1:30001", "interval": -1})
        assert rc == 1 and result["msg"] == "interval must be more than 0 seconds, not -1.0"
        router.status = 500
        rc, result = run_module("worker_drain", {"url": url, "worker": "http://127.0.0.1:30001"})
        assert rc == 1 and "\n" not in result["msg"]
        assert result["msg"].startswith("the router at %s answered 500 to GET /workers" % url)


def test_a_dripping_worker_or_router_ends_the_drain_within_its_bound():
    """Round 3, M1: a worker answering 200 with a 10 MB Content-Length and one byte every 2 s kept the drain
    waiting for ever (timeout 10). Each probe now ends at its deadline or bound, and so does the drain; a
    dripping router is a router that does not answer."""
    import time

    from drip_server import drip_server

    with router_standin() as (url, router), drip_server(length=1000) as (worker, server):
        router.register(worker)
        start = time.monotonic()
        rc, result = run_module("worker_drain", {"url": url, "worker": worker, "timeout": 10, "interval": 1},
                                timeout=30)
        assert rc == 0 and result["removed"] and router.urls() == [], result
        assert time.monotonic() - start < 15 and server.served >= 1
    with drip_server() as (dripping_router, _server):
        start = time.monotonic()
        rc, result = run_module("worker_drain", {"url": dripping_router, "worker": "http://127.0.0.1:30001",
                                                 "timeout": 10}, timeout=30)
        assert rc == 0 and result["router_answered"] is False and not result["changed"], result
        assert result["reason"] == f"the router at {dripping_router} does not answer GET /workers: GET " \
                                   f"{dripping_router}/workers answered 200 with 10485760 bytes, more than the " \
                                   "8388608 read here"
        assert time.monotonic() - start < 5


def test_the_router_s_control_plane_key_is_read_on_the_host_and_sent_and_without_it_nothing_is_removed(tmp_path):
    """Round 3, N5: a router with a control-plane key refuses the removal without it (401, the worker stays);
    with key_file the module sends it as a bearer token, and it appears in no result."""
    key = "rt3-drain-K3y"  # noqa: S105 - a test key
    key_file = tmp_path / "router.env"
    key_file.write_text("SGLANG_ROUTER_CONTROL_PLANE_API_KEY=%s\n" % key)
    with router_standin() as (url, router), loads_standin() as (worker, instance):
        router.key = key
        router.register(worker)
        instance.running = 0
        rc, result = run_module("worker_drain", {"url": url, "worker": worker, "interval": 0.1})
        assert rc == 1 and result["msg"] == (
            "the router at %s answered 401 to GET /workers: Missing or invalid Authorization header" % url)
        assert router.urls() == [worker] and instance.requests == []
        router.refused.clear()
        rc, result = run_module("worker_drain", {"url": url, "worker": worker, "interval": 0.1,
                                                 "key_file": str(key_file)})
        assert rc == 0, result
        assert result["removed"] and result["drained"] and router.urls() == [] and router.refused == []
        assert key not in str(result)
