"""router_workers against the real SGLang router (sglang-router, read from 0.3.2) on 127.0.0.1, its workers
two fixture SGLang servers (fixture sglang 0.5.11 on the fixture driver's cards): workers added, a request
through the router reaching both, an exact swap whose traffic then reaches only the new one, check mode,
a worker that never answers, removal of the last; and worker_drain: a worker taken out while a request through the
router runs on it, the request finishing, the wait ending once the worker's /v1/loads shows nothing running, the
worker registered again. The fixture servers are this checkout's (its http_server.py put in place of the
wheelhouse's, which may predate /v1/loads). Skipped unless DFLASH_REAL_ROUTER_VENV names a venv where
``import sglang_router`` works (docs/testing.md, "The real router")."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import FIXTURE_OUT, UV
from module_runner import run_module

VENV = os.environ.get("DFLASH_REAL_ROUTER_VENV", "")
HTTP_SERVER = (Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "python" / "sglang" / "srt" / "entrypoints"
               / "http_server.py")
TOKEN_MS = 50  # each output token after the first takes this long on the fixture servers
ROUTER_PY = Path(VENV) / "bin" / "python"


def _router_missing():
    if not VENV:
        return "DFLASH_REAL_ROUTER_VENV is not set (a venv with sglang-router installed)"
    if subprocess.run([str(ROUTER_PY), "-c", "import sglang_router.launch_router"], capture_output=True,
                      check=False).returncode != 0:
        return "DFLASH_REAL_ROUTER_VENV=%s has no importable sglang_router" % VENV
    if not (FIXTURE_OUT / "wheelhouse").is_dir() or not (FIXTURE_OUT / "driver" / "lib").is_dir():
        return "the fixture build (%s) is missing: make fixtures" % FIXTURE_OUT
    return None


pytestmark = pytest.mark.skipif(bool(_router_missing()), reason=_router_missing() or "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=10):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)


def wait_for(predicate, what, proc, log, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail("%s: not within %ss; log:\n%s" % (what, timeout, log.read_text()[-3000:]))


@pytest.fixture
def stack(tmp_path):
    """(router URL, [worker URL, worker URL], {worker URL: its log}) with the router started on the first
    worker only; every process stopped at the end."""
    venv = tmp_path / "sglang-venv"
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    subprocess.run([str(UV), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "--no-index",
                    "--find-links", str(FIXTURE_OUT / "wheelhouse"), "sglang==0.5.11", "torch==2.11.0+cu130"],
                   check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    shutil.copyfile(HTTP_SERVER, Path(site) / "sglang" / "srt" / "entrypoints" / "http_server.py")
    model, dev = tmp_path / "Qwen3-8B", tmp_path / "dev"
    model.mkdir()
    dev.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                   "max_position_embeddings": 40960}))
    for node in ("nvidiactl", "nvidia0", "nvidia1"):
        (dev / node).touch()
    conf = tmp_path / "gpus.conf"
    conf.write_text("".join(
        "dev_dir=%s\n" % dev if line.startswith("dev_dir=") else
        "state_dir=%s\n" % (tmp_path / "state") if line.startswith("state_dir=") else line + "\n"
        for line in (FIXTURE_OUT / "driver" / "etc" / "ct200.conf").read_text().splitlines()))
    procs, workers, logs = [], [], {}
    try:
        for gpu in (0, 1):
            port = free_port()
            url = "http://127.0.0.1:%d" % port
            log = tmp_path / ("worker-%d.log" % port)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "FAKE_", "CUDA_"))}
            env.update(HOME=str(tmp_path), CUDA_VISIBLE_DEVICES=str(gpu), DFLASH_FIXTURE_GPU_CONFIG=str(conf),
                       LD_LIBRARY_PATH=str(FIXTURE_OUT / "driver" / "lib"), SGLANG_FIXTURE_STARTUP_DELAY="0",
                       SGLANG_FIXTURE_TOKEN_MS=str(TOKEN_MS))
            with open(log, "w") as out:
                proc = subprocess.Popen([str(venv / "bin" / "python"), "-m", "sglang.launch_server", "--model-path",
                                         str(model), "--port", str(port), "--served-model-name", "qwen3-8b"],
                                        stdout=out, stderr=subprocess.STDOUT, env=env)
            procs.append(proc)
            wait_for(lambda log=log: "ready to roll" in log.read_text(), "fixture SGLang server on GPU %d" % gpu,
                     proc, log)
            workers.append(url)
            logs[url] = log
        port = free_port()
        router = "http://127.0.0.1:%d" % port
        rlog = tmp_path / "router.log"
        with open(rlog, "w") as out:
            proc = subprocess.Popen([str(ROUTER_PY), "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                                     "--port", str(port), "--prometheus-port", str(free_port()),
                                     "--worker-urls", workers[0], "--policy", "round_robin",
                                     "--health-check-interval-secs", "1"],
                                    stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, NO_COLOR="1"))
        procs.append(proc)
        wait_for(lambda: http("GET", router + "/workers")[0] == 200, "the router", proc, rlog)
        yield router, workers, logs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def served(logs, url):
    return logs[url].read_text().count('"POST /v1/completions')


def complete(router):
    return http("POST", router + "/v1/completions", {"model": "qwen3-8b", "prompt": "hi", "max_tokens": 4})


def test_the_real_router(stack):
    router, (first, second), logs = stack
    rc, result = run_module("router_workers", {"url": router, "workers": [first, second]})
    assert rc == 0, result
    assert result["changed"] and result["added"] == [second]
    assert sorted((w["url"], w["healthy"], w["model"]) for w in result["after"]) == sorted([
        (first, True, "qwen3-8b"), (second, True, "qwen3-8b")])
    for _request in range(4):
        status, answer = complete(router)
        assert status == 200 and answer["choices"][0]["text"], answer
    assert served(logs, first) == 2 and served(logs, second) == 2

    rc, check = run_module("router_workers", {"url": router, "workers": [second], "state": "exact"}, check=True,
                           diff=True)
    assert rc == 0 and check["changed"] and check["removed"] == [first]
    assert check["diff"]["after"] == second + "\n"
    assert sorted(w["url"] for w in http("GET", router + "/workers")[1]["workers"]) == sorted([first, second])

    rc, swap = run_module("router_workers", {"url": router, "workers": [second], "state": "exact"})
    assert rc == 0 and swap["changed"] and [w["url"] for w in swap["after"]] == [second]
    before = served(logs, first)
    for _request in range(3):
        assert complete(router)[0] == 200
    assert served(logs, first) == before
    rc, again = run_module("router_workers", {"url": router, "workers": [second], "state": "exact"})
    assert rc == 0 and not again["changed"]

    dead = "http://127.0.0.1:%d" % free_port()
    rc, refused = run_module("router_workers", {"url": router, "workers": [dead], "timeout": 3})
    assert rc == 1 and refused["msg"] == ("the router at %s did not apply the change within 3s: worker %s not "
                                          "registered (its job: processing)" % (router, dead))
    assert [w["url"] for w in http("GET", router + "/workers")[1]["workers"]] == [second]

    rc, gone = run_module("router_workers", {"url": router, "workers": [second], "state": "absent"})
    assert rc == 0 and gone["changed"] and gone["after"] == []
    assert complete(router)[0] == 503


def running(worker):
    status, loads = http("GET", worker + "/v1/loads")
    assert status == 200, loads
    return loads["aggregate"]["total_running_reqs"]


def test_drain_against_the_real_router(stack):
    router, (first, second), logs = stack
    answers = []
    long_request = threading.Thread(target=lambda: answers.append(http(
        "POST", router + "/generate", {"text": "a long answer", "sampling_params": {"max_new_tokens": 120}},
        timeout=60)))
    long_request.start()  # through the router, to its only worker: first
    deadline = time.monotonic() + 10
    while running(first) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running(first) == 1
    rc, result = run_module("router_workers", {"url": router, "workers": [first, second]})
    assert rc == 0 and result["added"] == [second], result

    rc, drained = run_module("worker_drain", {"url": router, "worker": first, "interval": 0.2, "timeout": 60})
    assert rc == 0, drained
    assert drained["registered"] and drained["removed"] and drained["drained"] and not drained["timed_out"]
    assert drained["in_flight"] == 0 and drained["seconds"] > 0.5  # it waited for the request
    long_request.join()
    status, answer = answers[0]
    assert status == 200 and answer["meta_info"]["completion_tokens"] == 120, answer  # the removal cut nothing
    assert [w["url"] for w in http("GET", router + "/workers")[1]["workers"]] == [second]
    before = served(logs, first)
    for _request in range(2):
        assert complete(router)[0] == 200
    assert served(logs, first) == before  # out of the router: no new request

    rc, back = run_module("router_workers", {"url": router, "workers": [first]})
    assert rc == 0 and back["added"] == [first], back
    for _request in range(2):
        assert complete(router)[0] == 200
    assert served(logs, first) == before + 1  # round robin reaches it again
    rc, again = run_module("worker_drain", {"url": router, "worker": "http://127.0.0.1:1"})
    assert rc == 0 and not again["registered"] and not again["changed"]


LAUNCHER = Path(__file__).resolve().parents[4] / "roles" / "sglang_router" / "files" / "sglang_router_launch.py"
KEY = "rt3-real-router-K3y-0123456789abcdefghijklmnopq"  # noqa: S105 - a test key


def answer(method, url, body=None):
    """(status, text) of one request without a key; status None when nothing answered."""
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)


@pytest.fixture
def keyed_router(tmp_path):
    """(router URL, its key file, its pid, its log): the real router started as its unit starts it, through the
    role's launcher with the key in its environment (from the env file the role writes)."""
    key_file = tmp_path / "router.env"
    key_file.write_text("SGLANG_ROUTER_CONTROL_PLANE_API_KEY=%s\n" % KEY)
    port = free_port()
    router = "http://127.0.0.1:%d" % port
    rlog = tmp_path / "router.log"
    env = dict(os.environ, NO_COLOR="1", SGLANG_ROUTER_CONTROL_PLANE_API_KEY=KEY)
    with open(rlog, "w") as out:
        proc = subprocess.Popen([str(ROUTER_PY), "-I", str(LAUNCHER), "--host", "127.0.0.1", "--port", str(port),
                                 "--prometheus-port", str(free_port()), "--policy", "round_robin"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: answer("GET", router + "/health")[0] == 200, "the router", proc, rlog)
        yield router, key_file, proc.pid, rlog
    finally:
        proc.kill()
        proc.wait()


def test_the_real_router_s_worker_api_needs_its_key_which_the_modules_send(keyed_router, tmp_path):
    """Round 3, N5: a rogue worker registered without the key is refused (401) and never listed; the modules
    read the key from the file and are let in; the key is on no command line and in no log."""
    router, key_file, pid, rlog = keyed_router
    status, body = answer("POST", router + "/workers", {"url": "http://127.0.0.1:%d" % free_port()})
    assert status == 401 and "Authorization" in body
    assert answer("GET", router + "/workers")[0] == 401
    status, body = answer("DELETE", router + "/workers/2acd9bff-c1d7-424a-ae42-1b79326d4df9")
    assert status == 401
    rc, refused = run_module("router_workers", {"url": router, "workers": []})
    assert rc == 1 and refused["msg"] == ("the router at %s answered 401 to GET /workers: Missing or invalid "
                                          "Authorization header" % router)
    rc, result = run_module("router_workers", {"url": router, "workers": [], "state": "exact",
                                               "key_file": str(key_file)})
    assert rc == 0 and result["before"] == [] and result["after"] == [] and not result["changed"], result
    rc, drained = run_module("worker_drain", {"url": router, "worker": "http://127.0.0.1:1", "timeout": 1,
                                              "key_file": str(key_file)})
    assert rc == 0 and drained["router_answered"] and not drained["registered"], drained
    rc, drained = run_module("worker_drain", {"url": router, "worker": "http://127.0.0.1:1", "timeout": 1})
    assert rc == 1 and "answered 401" in drained["msg"]
    assert KEY not in json.dumps([refused, result, drained])
    assert KEY.encode() not in Path("/proc/%d/cmdline" % pid).read_bytes()
    assert KEY not in rlog.read_text() and "Control plane API key authentication enabled (1 keys)" in rlog.read_text()


def test_the_launcher_does_not_start_the_real_router_without_a_key(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_ROUTER_CONTROL_PLANE_API_KEY"}
    proc = subprocess.run([str(ROUTER_PY), "-I", str(LAUNCHER), "--host", "127.0.0.1", "--port", str(port)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("sglang-router-launch: no usable SGLANG_ROUTER_CONTROL_PLANE_API_KEY")
    assert answer("GET", "http://127.0.0.1:%d/health" % port)[0] is None
