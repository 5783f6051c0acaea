"""dflash_ready.py (the readiness host script): the API key comes from the instance's env
file, read by systemd's EnvironmentFile rules, never from the task's environment."""
from __future__ import annotations

import contextlib
import http.server
import importlib.util
import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[4] / "roles" / "sglang_service" / "files" / "dflash_ready.py"
_spec = importlib.util.spec_from_file_location("dflash_ready", SCRIPT)
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)


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
    assert mod.parse_env_file(text) == expected


def test_the_key_is_read_from_the_env_file(tmp_path):
    env = tmp_path / "qwen3-8b.env"
    env.write_text('CUDA_VISIBLE_DEVICES=1\nSGLANG_API_KEY="sk-a\\"b c"\nSGLANG_PORT=30001\n')
    assert mod.api_key(str(env)) == 'sk-a"b c'
    assert mod.api_key(str(tmp_path / "missing.env")) == ""
    assert mod.api_key("") == ""


@pytest.mark.parametrize(("interval", "expected"), [
    (5, [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]),     # the default: quick at first, then every 5 s
    (1, [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),
    (0.2, [0.2] * 6),                       # an interval below the first wait is the wait
    (0, [0.0] * 6),
])
def test_probes_start_quick_and_slow_down_to_the_interval(interval, expected):
    assert list(itertools.islice(mod.waits(interval), len(expected))) == expected


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


def ready(request: dict, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), json.dumps(request)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=30, check=False)


def test_the_key_travels_in_no_argument_and_no_environment(tmp_path):
    """A server that demands the key: the script finds it only through env_file; the
    request (the command line Ansible builds) and the environment carry none."""
    key = "sk-secret-1234"
    env = tmp_path / "m.env"
    env.write_text(f'SGLANG_API_KEY="{key}"\n')
    with fake_sglang("m", key) as base:
        request = {"base": base, "model": "m", "unit": "none.service", "timeout": 2, "interval": 0.2,
                   "max_restarts": 0}
        without = ready(request, {"DFLASH_API_KEY": key})
        with_file = ready({**request, "env_file": str(env)})
    assert without.returncode == 1 and "answered 401" in json.loads(without.stdout)["reason"]
    assert with_file.returncode == 0, with_file.stdout + with_file.stderr
    assert json.loads(with_file.stdout)["models"] == ["m"]
    assert key not in with_file.stdout + with_file.stderr


def test_a_server_that_serves_another_model_is_not_ready():
    """Healthy, but /v1/models names another model (a stale server on the port, a wrong
    served_model_name): not ready, and the reason names both."""
    with fake_sglang("other") as base:
        proc = ready({"base": base, "model": "qwen3-8b-dflash", "unit": "none.service", "timeout": 1,
                      "interval": 0.2, "max_restarts": 0})
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["ready"] is False
    assert result["models"] == ["other"]
    assert result["reason"] == "not ready within 1s: /v1/models answers ['other'], not naming qwen3-8b-dflash"
