"""pydist/dist_info.py: venv layout and installed distributions from files."""

from __future__ import annotations

import os

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import (
    MAX_METADATA_BYTES,
    list_dists,
    name_and_version,
    name_matches,
    normalize_name,
    parse_metadata_headers,
    parse_wheel_tags,
    read_metadata,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError, open_venv
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
    # header names are case-insensitive; the first empty line ends the headers
    assert parse_wheel_tags("Wheel-Version: 1.0\ntag: cp311-abi3-linux_x86_64\n\nTag: body\n") == [
        "cp311-abi3-linux_x86_64"]


def test_metadata_continuation_lines_holding_only_spaces():
    """Real sglang 0.5.9: a License field over continuation lines, some holding only spaces, before Requires-Dist."""
    licence = "Apache License\n" + "".join("        %s\n        \n" % ("x" * 70) for _line in range(4000))
    text = ("Metadata-Version: 2.4\nName: sglang\nVersion: 0.5.9\nLicense: " + licence
            + "Requires-Dist: torch==2.9.1\nRequires-Dist: sgl-kernel==0.3.21\n\n# sglang\nRequires-Dist: body\n")
    assert len(text) > 256 * 1024  # no size cap cuts it short
    fields = parse_metadata_headers(text)
    assert name_and_version(fields) == ("sglang", "0.5.9")
    assert fields["Requires-Dist"] == ["torch==2.9.1", "sgl-kernel==0.3.21"]


def test_read_metadata_refuses_special_and_huge_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        read_metadata(str(fifo))  # opened without waiting for a writer, and refused
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    with pytest.raises(OSError, match="character device"):
        read_metadata(str(zero))
    big = tmp_path / "big"
    with open(big, "wb") as fh:
        fh.truncate(MAX_METADATA_BYTES + 1)
    with pytest.raises(OSError, match="more than"):
        read_metadata(str(big))
