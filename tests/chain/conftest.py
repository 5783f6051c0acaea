"""Fixtures for the seed-chain tests: the fixture index served over HTTP on
loopback, uv venvs installed from it, a fixture-driver GPU config, and an
isolated runner (see isolation.py) with a server launcher."""
from __future__ import annotations

import functools
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import isolation  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _needs_root():
    if os.geteuid() != 0:
        pytest.skip("the chain runs in private mount namespaces (unshare -m): run as root, as CI does")


@pytest.fixture(scope="session")
def index_url(fixture_build):
    """The fixture index (PEP 503 layout) over HTTP on 127.0.0.1."""
    handler = functools.partial(_QuietHandler, directory=str(fixture_build))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output readable
        pass


@pytest.fixture(scope="session")
def uv_env(tmp_path_factory):
    """Environment for uv: a private cache so runs do not depend on ~/.cache."""
    env = dict(os.environ)
    env["UV_CACHE_DIR"] = str(tmp_path_factory.mktemp("uv-cache"))
    env["UV_LINK_MODE"] = "copy"  # the DFlash overlay writes over installed files
    env.pop("UV_INDEX_URL", None)
    env.pop("PIP_INDEX_URL", None)
    return env


class Venv:
    """A uv venv whose packages come from the fixture index only."""

    def __init__(self, path: Path, uv: Path, index_url: str, env: dict):
        self.path = path
        self.uv = uv
        self.index_url = index_url
        self.env = env
        self.python = path / "bin" / "python"
        ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
        self.site = path / "lib" / ver / "site-packages"

    def install(self, *reqs: str, no_deps: bool = False) -> str:
        cmd = [str(self.uv), "pip", "install", "--python", str(self.python), "--index-url", self.index_url]
        if no_deps:
            cmd.append("--no-deps")
        proc = subprocess.run(cmd + list(reqs), env=self.env, capture_output=True, text=True)
        assert proc.returncode == 0, f"uv pip install {reqs} failed:\n{proc.stderr}"
        return proc.stderr

    def uninstall(self, *names: str) -> None:
        cmd = [str(self.uv), "pip", "uninstall", "--python", str(self.python), *names]
        subprocess.run(cmd, env=self.env, check=True, capture_output=True)

    def versions(self) -> dict[str, str]:
        out = subprocess.run(
            [str(self.uv), "pip", "list", "--python", str(self.python), "--format", "json"],
            env=self.env, check=True, capture_output=True, text=True,
        ).stdout
        return {d["name"]: d["version"] for d in json.loads(out)}


@pytest.fixture
def new_venv(tmp_path, uv_bin, index_url, uv_env):
    def _new(name="venv") -> Venv:
        path = tmp_path / name
        subprocess.run([str(uv_bin), "venv", "--quiet", "--python", sys.executable, str(path)], env=uv_env, check=True)
        return Venv(path, uv_bin, index_url, uv_env)

    return _new


@pytest.fixture(scope="session")
def driver(fixture_build):
    return fixture_build / "driver"


@pytest.fixture(scope="session")
def system_cache(tmp_path_factory, driver):
    """An ld.so cache with no CUDA toolkit and the fixture driver as the system's."""
    return isolation.build_cache(tmp_path_factory.mktemp("ldcache"), [str(driver / "lib")])


@pytest.fixture
def gpu_host(tmp_path, driver):
    """Write a fixture-driver config for a CT200-like host; returns a function
    (faults={index: 'dead'|'hang'}, nodes=True) -> env dict for processes."""

    def _host(faults=None, nodes=True, conf="ct200.conf"):
        devdir = tmp_path / "dev"
        devdir.mkdir(exist_ok=True)
        lines = []
        gpus = set()
        for line in (driver / "etc" / conf).read_text().splitlines():
            key = line.split("=", 1)[0].strip()
            if key in ("dev_dir", "state_dir"):
                continue
            if key.startswith("gpu.") and key.endswith(".fault"):
                continue
            if key.startswith("gpu."):
                gpus.add(int(key.split(".")[1]))
            lines.append(line)
        lines.append(f"dev_dir={devdir}")
        lines.append(f"state_dir={tmp_path / 'state'}")
        for idx, fault in (faults or {}).items():
            lines.append(f"gpu.{idx}.fault={fault}")
        cfg = tmp_path / "gpus.conf"
        cfg.write_text("\n".join(lines) + "\n")
        if nodes:
            for name in ["nvidiactl"] + [f"nvidia{i}" for i in sorted(gpus)]:
                node = devdir / name
                if not node.exists():
                    # a character device like the real nodes (here: 1,3 = null)
                    os.mknod(node, 0o666 | 0o020000, os.makedev(1, 3))
        env = {
            "PATH": f"{driver / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(tmp_path / "home"),
            "DFLASH_FIXTURE_GPU_CONFIG": str(cfg),
            "CUDA_VISIBLE_DEVICES": "1",
            "SGLANG_FIXTURE_STARTUP_DELAY": "0.2",
        }
        return env

    return _host


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path):
        self.proc = proc
        self.port = port
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str, timeout: float = 5.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as resp:
            return resp.status, resp.read().decode()

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """True once /health answers 200; False if the process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                status, _ = self.get("/health", timeout=1.0)
                if status == 200:
                    return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"server neither answered nor exited in {timeout}s:\n{self.output()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def run_isolated(system_cache):
    """Run argv where the system has the driver but no CUDA toolkit."""

    def _run(argv, env, timeout=60):
        return subprocess.run(
            isolation.isolated([str(a) for a in argv], system_cache),
            env=env, capture_output=True, text=True, timeout=timeout,
        )

    return _run


@pytest.fixture
def launch(tmp_path, system_cache):
    servers: list[Server] = []

    def _launch(venv: Venv, env: dict, *args: str) -> Server:
        port = free_port()
        log = tmp_path / f"server-{port}.log"
        argv = [str(venv.python), "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(port), *args]
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                isolation.isolated(argv, system_cache), env=env, stdout=fh, stderr=subprocess.STDOUT
            )
        server = Server(proc, port, log)
        servers.append(server)
        return server

    yield _launch
    for server in servers:
        server.stop()


@pytest.fixture
def models(tmp_path):
    """A target and a draft model directory (config.json only: no weights are loaded)."""
    target = tmp_path / "models" / "Qwen3-8B"
    draft = tmp_path / "models" / "Qwen3-8B-DFlash-b16"
    for d, arch in ((target, "Qwen3ForCausalLM"), (draft, "DFlashDraftModel")):
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"architectures": [arch]}) + "\n")
    return target, draft
