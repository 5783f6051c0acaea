"""The dflash_tree_capture module shell: check mode writes nothing, changed from the tar's bytes, diff."""
from __future__ import annotations

import json
import tarfile

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.modules import dflash_tree_capture
from dflash_tree_support import make_reference_venv, snapshot


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            dflash_tree_capture.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_check_mode_writes_nothing_then_the_tar_is_written_once(tmp_path, capsys):
    venv = make_reference_venv(tmp_path)
    dest = tmp_path / "dflash-src.tar"
    before = snapshot(tmp_path)
    res = run_module({"venv": str(venv), "dest": str(dest), "_ansible_check_mode": True, "_ansible_diff": True},
                     capsys)
    assert res["changed"] is True and "failed" not in res
    assert snapshot(tmp_path) == before
    assert res["diff"]["prepared"].splitlines()[0] == "add pyproject.toml"
    assert res["version"] == "0.5.11" and res["files"] == 3
    assert res["requires"] == ["sglang-kernel==0.4.2", "transformers==5.6.0"]
    assert res["declared"] == "the sglang 0.5.11 METADATA of the reference venv"
    assert res["dest"] == str(dest) and res["site_packages"] == str(venv / "lib" / "python3.11" / "site-packages")
    res2 = run_module({"venv": str(venv), "dest": str(dest)}, capsys)
    assert res2["changed"] is True and res2["sha256"] == res["sha256"]
    with tarfile.open(dest) as tf:
        assert len(tf.getnames()) == 4
    res3 = run_module({"venv": str(venv), "dest": str(dest), "_ansible_diff": True}, capsys)
    assert res3["changed"] is False and "diff" not in res3


def test_a_venv_without_sglang_fails_with_one_line(tmp_path, capsys):
    site = tmp_path / "v" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    res = run_module({"venv": str(tmp_path / "v"), "dest": str(tmp_path / "t.tar")}, capsys)
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"] == "%s has no sglang package" % site
    assert not (tmp_path / "t.tar").exists()
