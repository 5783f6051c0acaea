"""dist_info.py: venv layout and installed distributions from files."""

from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.dist_info import (
    list_dists,
    name_and_version,
    name_matches,
    normalize_name,
    parse_metadata_headers,
    parse_wheel_tags,
)
from ansible_collections.dflash.deploy.plugins.module_utils.venv import VenvError, open_venv
from transplant_support import PYVER, add_dist, make_venv


def test_normalize_and_match():
    assert normalize_name("Sgl_Kernel") == "sgl-kernel"
    assert name_matches("nvidia_cuda_runtime_cu12", ["nvidia-*-cu12"])
    assert not name_matches("nvidia-cuda-runtime", ["nvidia-*-cu12"])
    assert name_matches("torch", ["TORCH"])
    assert not name_matches("torchvision", ["torch"])


def test_open_venv(tmp_path):
    venv = make_venv(tmp_path / "v")
    info = open_venv(str(venv))
    assert info.site_packages.endswith("lib/python%s/site-packages" % PYVER)
    assert "%d.%d" % info.version == PYVER
    assert info.bin == str(venv / "bin")


def test_not_a_venv(tmp_path):
    with pytest.raises(VenvError, match="does not exist"):
        open_venv(str(tmp_path / "missing"))
    with pytest.raises(VenvError, match="pyvenv.cfg"):
        open_venv(str(tmp_path))
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    with pytest.raises(VenvError, match="site-packages"):
        open_venv(str(tmp_path))


def test_list_dists(tmp_path):
    venv = make_venv(tmp_path / "v")
    add_dist(venv, "sgl-kernel", "0.3.21", {"sgl_kernel/__init__.py": b""})
    add_dist(venv, "torch", "2.11.0+cu130", {"torch/__init__.py": b""})
    dists = list_dists(open_venv(str(venv)).site_packages)
    assert [(d.name, d.version, d.key) for d in dists] == [
        ("sgl-kernel", "0.3.21", "sgl-kernel"), ("torch", "2.11.0+cu130", "torch")]


def test_metadata_and_wheel_parsing():
    fields = parse_metadata_headers("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n\nName: body\n")
    assert name_and_version(fields) == ("torch", "2.11.0")
    assert name_and_version({}) == (None, None)
    assert parse_wheel_tags("Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\nTag: py3-none-any\n") == [
        "cp311-cp311-linux_x86_64", "py3-none-any"]
