"""A read-only or full destination: refused or rolled back, and the destination is unchanged.

chmod does not stop root, so the destination really is read-only (a read-only bind mount) or
really is full (a small tmpfs), each inside a private mount namespace (unshare -m) that
disappears with the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transplant_support import CPTAG, add_dist, make_venv

TAG = f"{CPTAG}-{CPTAG}-linux_x86_64"
HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parents[1] / "support"

# Runs inside the namespace: mount, snapshot, run the module, snapshot again, print JSON.
INNER = r"""
import json, os, subprocess, sys
sys.path.insert(0, {support!r})
from transplant_support import run_module, snapshot
from pathlib import Path
dest, src, mode = Path({dest!r}), {src!r}, {mode!r}
if mode == "ro":
    subprocess.run(["mount", "--bind", str(dest), str(dest)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(dest)], check=True)
else:
    staged = Path(str(dest) + ".staged")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size={size}", "tmpfs", str(dest)], check=True)
    subprocess.run(["cp", "-a", str(staged) + "/.", str(dest)], check=True)
before = snapshot(dest)
rc, result = run_module({{"src": src, "dest": str(dest), "distributions": ["torch"], "link": "auto"}})
after = snapshot(dest)
print(json.dumps({{"rc": rc, "msg": result.get("msg"), "same": before == after,
                  "diff": sorted(set(before.items()) ^ set(after.items()), key=str)[:10]}}, default=str))
"""


def _world(tmp_path):
    src = make_venv(tmp_path / "src")
    add_dist(src, "torch", "2.11.0+cu130", {"torch/__init__.py": b"v130", "torch/lib/libtorch.so": b"x" * 3_000_000},
             tag=TAG)
    dest = make_venv(tmp_path / "dest")
    add_dist(dest, "torch", "2.11.0+cu128", {"torch/__init__.py": b"v128", "torch/lib/libtorch.so": b"y" * 100_000},
             tag=TAG)
    return src, dest


def _inner(tmp_path, src, dest, mode, size="1m"):
    code = INNER.format(support=str(SUPPORT), dest=str(dest), src=str(src), mode=mode, size=size)
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", code],
                          capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0 and "unshare" in proc.stderr and "Operation not permitted" in proc.stderr:
        pytest.skip("mount namespaces are not available here: " + proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare for a private mount namespace")


def test_read_only_destination(tmp_path):
    src, dest = _world(tmp_path)
    out = _inner(tmp_path, src, dest, "ro")
    assert out["rc"] != 0 and "read-only filesystem" in out["msg"], out
    assert out["same"], out["diff"]


def test_full_destination(tmp_path):
    src, dest = _world(tmp_path)
    staged = Path(str(dest) + ".staged")
    dest.rename(staged)
    dest.mkdir()
    # room for the existing venv (~0.2 MB) and the journal, not for the 3 MB library
    out = _inner(tmp_path, src, dest, "full", size="1m")
    assert out["rc"] != 0 and "no space left" in out["msg"] and "rolled back" in out["msg"], out
    assert out["same"], out["diff"]
