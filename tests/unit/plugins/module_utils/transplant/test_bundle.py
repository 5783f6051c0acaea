"""transplant/bundle.py: pack, read, verify; tampering refused."""

from __future__ import annotations

import json
import os
import tarfile

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import open_venv
from ansible_collections.dflash.deploy.plugins.module_utils.site_packages_transplant import _pack_items
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.bundle import MANIFEST, Bundle, BundleError, pack
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.source import VenvSource
from transplant_support import add_dist, make_venv


@pytest.fixture
def packed(tmp_path):
    venv = make_venv(tmp_path / "src")
    add_dist(venv, "torch", "2.11.0+cu130",
             {"torch/__init__.py": b"v=130\n", "torch/lib/libtorch.so": b"\x7fELF" * 999},
             scripts={"torchrun": "print('run')\n"})
    add_dist(venv, "nvidia-cuda-runtime", "13.0.96", {"nvidia/cu13/lib/libcudart.so.13": b"cudart13" * 100})
    source = VenvSource(open_venv(str(venv)))
    dists = source.load(["torch", "nvidia-*"])
    out = tmp_path / "b.tar"
    manifest = pack(str(out), str(venv), (3, 11), _pack_items(source, dists))
    return out, manifest, venv


def test_pack_layout(packed):
    out, manifest, venv = packed
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert names[-1] == MANIFEST
    assert "bin/torchrun" in names and "site-packages/torch/lib/libtorch.so" in names
    assert manifest["source"]["venv"] == str(venv)
    torch = manifest["distributions"][1] if manifest["distributions"][0]["name"] != "torch" else \
        manifest["distributions"][0]
    assert {f["path"] for f in torch["files"]} >= {"torch/__init__.py", "../../../bin/torchrun"}
    bundle = Bundle(str(out))
    bundle.verify()
    assert bundle.read_member("site-packages/torch/__init__.py") == b"v=130\n"


def _flip_byte(path, member):
    with tarfile.open(path) as tar:
        offset = tar.getmember(member).offset_data
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def test_tampered_member_refused(packed):
    out = packed[0]
    _flip_byte(out, "site-packages/torch/lib/libtorch.so")
    with pytest.raises(BundleError, match="checksum mismatch in site-packages/torch/lib/libtorch.so"):
        Bundle(str(out)).verify()


def test_tampered_manifest_refused(packed):
    out = packed[0]
    with tarfile.open(out) as tar:
        offset = tar.getmember(MANIFEST).offset_data
        size = tar.getmember(MANIFEST).size
    with open(out, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"X" * size)
    with pytest.raises(BundleError, match="manifest does not parse"):
        Bundle(str(out))


def test_manifest_lie_refused(packed, tmp_path):
    """A manifest whose hash agrees with a swapped member but not with the RECORD inside is refused too."""
    out, manifest = packed[:2]
    work = tmp_path / "x"
    work.mkdir()
    with tarfile.open(out) as tar:
        tar.extractall(work, filter="data")
    (work / "site-packages/torch/__init__.py").write_bytes(b"v=666\n")
    import hashlib
    for dist in manifest["distributions"]:
        for item in dist["files"]:
            if item["path"] == "torch/__init__.py":
                item["sha256"] = hashlib.sha256(b"v=666\n").hexdigest()
    (work / MANIFEST).write_text(json.dumps(manifest))
    forged = tmp_path / "forged.tar"
    with tarfile.open(forged, "w", format=tarfile.PAX_FORMAT) as tar:
        for dist in manifest["distributions"]:
            for item in dist["files"]:
                tar.add(work / item["member"], item["member"])
        tar.add(work / MANIFEST, MANIFEST)
    with pytest.raises(BundleError, match="RECORD hash of torch/__init__.py disagrees"):
        Bundle(str(forged)).verify()


def test_extra_or_missing_members_refused(packed, tmp_path):
    out = packed[0]
    extra = tmp_path / "extra.tar"
    with tarfile.open(out) as src, tarfile.open(extra, "w", format=tarfile.PAX_FORMAT) as dst:
        for info in src.getmembers():
            dst.addfile(info, src.extractfile(info))
        evil = tarfile.TarInfo("site-packages/../../evil")
        evil.size = 0
        dst.addfile(evil)
    with pytest.raises(BundleError, match="does not list"):
        Bundle(str(extra)).verify()
    truncated = tmp_path / "trunc.tar"
    truncated.write_bytes(out.read_bytes()[:2048])
    with pytest.raises(BundleError):
        Bundle(str(truncated))


def test_not_a_bundle(tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(BundleError):
        Bundle(str(junk))
