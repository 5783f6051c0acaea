# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Round 3 N3 replayed with the real uv against a loopback simple index: one wheel added to a recorded
name==version (more specific than the recorded file) makes `uv pip compile --generate-hashes` list both
files, and `uv pip sync --require-hashes` install the added one; lock_hash_errors refuses that lock."""
from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import sysconfig
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]


def _load(name: str, path: Path):
    """Import by path under a unique name (``wheel`` would clash with PyPI's); dataclasses need sys.modules."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


mod = _load("dflash_lock_hashes_filter_index", REPO / "plugins" / "filter" / "lock_hashes.py")
wheel = _load("dflash_fixture_wheel", REPO / "tests" / "fixtures" / "wheel.py")
PLANTED = "zz_planted.pth"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def index(tmp_path):
    """(root, url): a simple index over root/wheelhouse, served on 127.0.0.1 for the test."""
    (tmp_path / "wheelhouse").mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def _publish(root: Path, tag: str, files: dict) -> str:
    """A wheel of triton 3.6.0 with ``files`` under ``tag`` in the index; returns its sha256."""
    tree = root / f"tree-{tag}"
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    dist = wheel.PyDist(name="triton", version="3.6.0", tag=tag, requires=[], tree=tree)
    path = wheel.write_wheel(dist, root / "wheelhouse")
    wheel.write_simple_index(root / "wheelhouse", root / "simple")
    return wheel.sha256_file(path)


def _uv(uv_bin, *args, stdin=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env["UV_CACHE_DIR"] = str(Path(cwd) / "uv-cache")
    done = subprocess.run([str(uv_bin), *args], input=stdin, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _lock(uv_bin, url, root):
    """The lock as sglang_venv's package_lock.yml makes it (uv pip compile --generate-hashes, an index);
    --refresh: the index page changes within the test, and uv's cache would keep the first one."""
    return _uv(uv_bin, "--no-config", "pip", "compile", "--refresh", "--quiet", "--no-header", "--generate-hashes",
               "--python", sys.executable, "--index-url", url, "-", stdin="triton==3.6.0\n", cwd=root)


def test_a_wheel_added_on_the_index_is_refused_against_the_recorded_lock_and_the_pins(index, uv_bin):
    root, url = index
    original = _publish(root, "py3-none-any", {"triton/__init__.py": "VERSION = '3.6.0'\n"})
    recorded = _lock(uv_bin, url, root)
    assert mod.lock_hashes(recorded) == {"triton==3.6.0": [original]}
    # The attacker adds a wheel for the host's platform (more specific than py3-none-any), with a .pth.
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    added = _publish(root, f"py3-none-{platform}", {"triton/__init__.py": "VERSION = '3.6.0'\n",
                                                    PLANTED: "# would run at every start of the interpreter\n"})
    lock = _lock(uv_bin, url, root)
    assert mod.lock_hashes(lock) == {"triton==3.6.0": sorted([original, added])}
    # What the refused lock would do: uv pip sync --require-hashes installs the added wheel.
    venv = root / "venv"
    _uv(uv_bin, "--no-config", "venv", "--quiet", "--python", sys.executable, str(venv), cwd=root)
    (root / "lock.txt").write_text(lock)
    _uv(uv_bin, "--no-config", "pip", "sync", "--quiet", "--require-hashes", "--link-mode", "copy", "--python",
        str(venv / "bin" / "python"), "--index-url", url, str(root / "lock.txt"), cwd=root)
    assert len(list(venv.glob(f"lib/python*/site-packages/{PLANTED}"))) == 1
    # The check refuses it, naming the package, version and the unknown hash, whatever vouches for the original.
    for source in ({"source": "release e5546f65f738d81c", "lock": recorded},
                   {"source": "sglang_venv_pinned_hashes", "hashes": {"triton==3.6.0": [original]}}):
        errors = mod.lock_hash_errors(lock, [source], [])
        assert len(errors) == 1 and "\n" not in errors[0], errors
        assert errors[0].startswith(f"triton==3.6.0 is sha256 {mod._short([original, added])}, but {source['source']} "
                                    f"recorded sha256 {original[:16]}… for the same name and version: sha256 {added} "
                                    "is in no record"), errors
        assert original not in errors[0] and "sglang_venv_accept_new_hashes=true" in errors[0]
    # The same index without the added file, and the added file vouched for on purpose, pass.
    assert mod.lock_hash_errors(recorded, [{"source": "release e5546f65f738d81c", "lock": recorded}], []) == []
    pinned = {"source": "sglang_venv_pinned_hashes", "hashes": {"triton==3.6.0": [added]}}
    assert mod.lock_hash_errors(lock, [{"source": "release e5546f65f738d81c", "lock": recorded}, pinned], []) == []
