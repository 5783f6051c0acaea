"""instance_ready against a fake SGLang server on 127.0.0.1, the module file run as a program with
its arguments in a file (as tests/gpu/real_sglang.sh runs it): the API key comes from the
instance's env file, never from an option or the environment; a server serving another model is
not ready; not ready fails with the reason as its message and the answer's fields beside it."""
from __future__ import annotations

import contextlib
import http.server
import json
import os
import pwd
import subprocess
import sys
import threading
from pathlib import Path

from conftest import COLLECTIONS, REPO

MODULE = REPO / "plugins" / "modules" / "instance_ready.py"
ME = pwd.getpwuid(os.getuid()).pw_name  # the fake server runs in this process, outside any unit
FIELDS = {"ready", "health", "models", "restarts", "reason", "seconds"}


@contextlib.contextmanager
def fake_sglang(model: str, key: str = ""):
    """A server on 127.0.0.1 answering /health_generate and /v1/models (naming `model`), and
    401 to a request without `Bearer <key>` when a key is given; yields its base URL."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if key and self.headers.get("Authorization") != "Bearer " + key:
                self.send_response(401)
                self.end_headers()
                return
            body = b"{}" if self.path == "/health_generate" else json.dumps({"data": [{"id": model}]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def ready(tmp_path: Path, args: dict, env: dict | None = None) -> subprocess.CompletedProcess:
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"user": ME, **args}}))
    return subprocess.run([sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(COLLECTIONS), **(env or {})},
                          timeout=30, check=False)


def answer(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout)


def test_the_key_travels_in_no_argument_and_no_environment(tmp_path):
    """A server that demands the key: the module finds it only through env_file; the
    options (what Ansible sends) and the environment carry none."""
    key = "sk-secret-1234"
    env = tmp_path / "m.env"
    env.write_text(f'SGLANG_API_KEY="{key}"\n')
    with fake_sglang("m", key) as base:
        request = {"base": base, "model": "m", "unit": "none.service", "timeout": 2, "interval": 0.2,
                   "max_restarts": 0}
        without = ready(tmp_path, request, {"DFLASH_API_KEY": key, "SGLANG_API_KEY": key})
        with_file = ready(tmp_path, {**request, "env_file": str(env)})
    assert without.returncode == 1 and "answered 401" in answer(without)["reason"]
    assert with_file.returncode == 0, with_file.stdout + with_file.stderr
    assert answer(with_file)["models"] == ["m"]
    assert key not in with_file.stdout + with_file.stderr


def test_a_server_that_serves_another_model_is_not_ready(tmp_path):
    """Healthy, but /v1/models names another model (a stale server on the port, a wrong
    served_model_name): not ready, and the reason names both."""
    with fake_sglang("other") as base:
        proc = ready(tmp_path, {"base": base, "model": "qwen3-8b-dflash", "unit": "none.service", "timeout": 1,
                                "interval": 0.2, "max_restarts": 0})
    result = answer(proc)
    assert proc.returncode == 1 and result["ready"] is False
    assert result["models"] == ["other"]
    assert result["reason"] == "not ready within 1s: /v1/models answers ['other'], not naming qwen3-8b-dflash"
    # the role reads the answer's fields at the top level of a failed result, and the reason is its message
    assert result["failed"] is True and result["msg"] == result["reason"] and result["changed"] is False
    assert FIELDS <= set(result) and result["health"] == 200


def test_ready_in_check_mode_too(tmp_path):
    """It only reads: check mode probes as a real run does; `changed` is false."""
    with fake_sglang("m") as base:
        proc = ready(tmp_path, {"base": base + "/", "model": "m", "unit": "none.service", "timeout": 5,
                                "interval": 0.2, "_ansible_check_mode": True})
    result = answer(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {k: result[k] for k in ("ready", "health", "models", "restarts", "reason", "changed")} == {
        "ready": True, "health": 200, "models": ["m"], "restarts": 0, "reason": None, "changed": False}
    assert "failed" not in result and isinstance(result["seconds"], float)


def test_nothing_listening(tmp_path):
    with fake_sglang("m") as base:
        pass  # shut down: the port answers nothing now
    proc = ready(tmp_path, {"base": base, "model": "m", "unit": "none.service", "timeout": 0, "interval": 0})
    result = answer(proc)
    assert proc.returncode == 1 and result["health"] is None and result["models"] == []
    assert result["msg"].startswith("not ready within 0s: /health_generate answered nothing: ")


def test_options_are_typed_and_required(tmp_path):
    proc = ready(tmp_path, {"base": "http://127.0.0.1:1", "model": "m"})
    assert proc.returncode == 1 and "missing required arguments: unit" in answer(proc)["msg"]
    proc = ready(tmp_path, {"base": "http://127.0.0.1:1", "model": "m", "unit": "u", "timeout": "soon"})
    assert proc.returncode == 1 and "timeout" in answer(proc)["msg"]


def test_no_proxy_from_the_environment(tmp_path):
    """A proxy in the host's environment (that answers nothing) is not asked: the probes go to base."""
    dead = {"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""}
    with fake_sglang("m") as base:
        proc = ready(tmp_path, {"base": base, "model": "m", "unit": "none.service", "timeout": 2, "interval": 0.2},
                     dead)
    assert proc.returncode == 0 and answer(proc)["ready"] is True, proc.stdout + proc.stderr


def test_a_dripping_server_or_a_file_base_ends_in_one_line(tmp_path):
    """Round 3: M1, instance_ready timeout=10 against a server dripping its answer ran for ever; m3, a file://
    base returned the file's content in the reason."""
    import re
    import time

    from drip_server import drip_server

    with drip_server(length=1000) as (base, _server):
        start = time.monotonic()
        proc = ready(tmp_path, {"base": base, "model": "m", "unit": "none.service", "timeout": 3, "interval": 1})
        seconds = time.monotonic() - start
    result = answer(proc)
    assert proc.returncode == 1 and seconds < 8, (seconds, result)
    assert re.fullmatch(r"not ready within 3s: /health_generate answered nothing: no complete answer within "
                        r"[0-9.]+s \(the deadline of the whole exchange\)", result["msg"]), result["msg"]
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE\n")
    proc = ready(tmp_path, {"base": f"file://{secret}#", "model": "m", "unit": "none.service", "timeout": 1})
    result = answer(proc)
    assert proc.returncode == 1 and result["msg"] == f"base file://{secret}# is not an http:// or https:// URL"
    assert "TOP-SECRET" not in proc.stdout + proc.stderr
