"""pydist/venv.py: one reader of a venv's files, a strict verdict (open_venv) and a lenient one (locate)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import distributions as D
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import list_dists
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError, locate, open_venv


def _venv(root, cfg="home = /usr/bin\nversion_info = 3.11.7\n", libs=("python3.11",), python=True):
    root.mkdir()
    if cfg is not None:
        (root / "pyvenv.cfg").write_text(cfg)
    for name in libs:
        (root / "lib" / name / "site-packages").mkdir(parents=True)
    if python:
        (root / "bin").mkdir()
        (root / "bin" / "python").symlink_to("/usr/bin/true")
    return root


def test_several_site_packages_both_verdicts_take_the_one_pyvenv_cfg_names(tmp_path):
    """python3.12 sorts after python3.11, but the interpreter (pyvenv.cfg) is 3.11: both readers agree on it."""
    venv = _venv(tmp_path / "v", libs=("python3.11", "python3.12"))
    want = str(venv / "lib" / "python3.11" / "site-packages")
    assert open_venv(str(venv)).site_packages == want
    located = locate(str(venv))
    assert located["site_packages"] == want and located["python_version"] == "3.11.7"
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # no version stated: the last by name
    assert locate(str(venv))["site_packages"] == str(venv / "lib" / "python3.12" / "site-packages")
    assert open_venv(str(venv)).version == (3, 12)


def test_locate_describes_what_open_venv_refuses(tmp_path):
    # no pyvenv.cfg, but an interpreter and a site-packages: a damaged venv pkg_probe still reports on
    bare = _venv(tmp_path / "bare", cfg=None)
    located = locate(str(bare))
    assert located["python"] == str(bare / "bin" / "python") and located["python_exists"]
    assert located["python_version"] == "3.11" and located["pyvenv_cfg"] == {}
    with pytest.raises(VenvError, match="no readable pyvenv.cfg"):
        open_venv(str(bare))
    # a linked lib/python3.11: described, never written into
    linked = _venv(tmp_path / "linked", libs=())
    (tmp_path / "elsewhere" / "site-packages").mkdir(parents=True)
    (linked / "lib").mkdir()
    (linked / "lib" / "python3.11").symlink_to(tmp_path / "elsewhere")
    assert locate(str(linked))["site_packages"] == str(linked / "lib" / "python3.11" / "site-packages")
    with pytest.raises(VenvError, match="no lib/pythonX.Y/site-packages"):
        open_venv(str(linked))
    # only lib64/ (lib/ absent), and a broken interpreter link
    lib64 = _venv(tmp_path / "lib64", libs=())
    (lib64 / "lib64" / "python3.11" / "site-packages").mkdir(parents=True)
    (lib64 / "bin" / "python").unlink()
    (lib64 / "bin" / "python3").symlink_to(tmp_path / "gone")
    located = locate(str(lib64))
    assert located["site_packages"] == str(lib64 / "lib64" / "python3.11" / "site-packages")
    assert located["python"] == str(lib64 / "bin" / "python3") and not located["python_exists"]


def test_locate_refusals(tmp_path):
    with pytest.raises(VenvError, match="does not exist") as info:
        locate(str(tmp_path / "missing"))
    assert info.value.kind == "venv_missing"
    (tmp_path / "file").write_text("")
    with pytest.raises(VenvError, match="is not a directory") as info:
        locate(str(tmp_path / "file"))
    assert info.value.kind == "not_a_venv"
    with pytest.raises(VenvError, match="has no lib/python3"):
        locate(str(_venv(tmp_path / "nosp", libs=())))


def test_unlistable_site_packages(tmp_path):
    """The one scanner says which directory it could not list, for the transplant and the probes alike."""
    missing = str(tmp_path / "nowhere")
    with pytest.raises(VenvError, match="cannot list %s: No such file or directory" % missing) as info:
        list_dists(missing)
    assert info.value.kind == "unreadable"
    with pytest.raises(ValueError, match="cannot list"):
        D.scan(missing)


def test_dist_without_metadata_named_by_its_directory(tmp_path):
    site = tmp_path / "site-packages"
    (site / "flash_attn-2.8.3.dist-info").mkdir(parents=True)
    (site / "not-a-dist.dist-info").write_text("")  # a file, not a directory
    (site / "README").write_text("")
    (dist,) = list_dists(str(site))
    assert (dist.name, dist.version, dist.key) == ("flash_attn", "2.8.3", "flash-attn")
    assert isinstance(dist.metadata_error, OSError) and dist.fields == {}
    dists = D.scan(str(site))
    assert list(dists) == ["flash-attn"]
    facts = dists["flash-attn"]
    assert facts["name"] == "flash_attn" and facts["version"] == "2.8.3"
    assert facts["errors"][0].startswith("METADATA: ") and os.path.isdir(facts["dist_info"])
