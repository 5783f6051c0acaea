"""The dflash_tree_info module shell: read-only, its fields, and the one-line refusal."""
from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.modules import dflash_tree_info


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            dflash_tree_info.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_what_the_tree_declares(tmp_path, capsys):
    (tmp_path / "python" / "sglang").mkdir(parents=True)
    (tmp_path / "python" / "sglang" / "_version.py").write_text("__version__ = version = '0.5.11'\n")
    (tmp_path / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\nversion = "0.5.11"\ndependencies = ["sglang-kernel==0.4.2"]\n')
    res = run_module({"source_dir": str(tmp_path), "_ansible_check_mode": True}, capsys)
    assert res["changed"] is False and "failed" not in res
    assert res["version"] == "0.5.11" and res["declared_version"] == "0.5.11"
    assert res["requires"] == ["sglang-kernel==0.4.2"]
    assert res["declared_in"] == str(tmp_path / "python" / "pyproject.toml")


def test_a_tree_that_declares_nothing_fails_with_one_line(tmp_path, capsys):
    (tmp_path / "src" / "sglang").mkdir(parents=True)
    res = run_module({"source_dir": str(tmp_path), "package_subdir": "src/sglang"}, capsys)
    assert res["failed"] is True and res["changed"] is False
    src = tmp_path / "src"
    assert res["msg"] == (
        f"the DFlash tree {src}/sglang declares no requirements ({src}/pyproject.toml or {src}/METADATA): "
        "capture it with playbooks/stage_artifacts.yml, or use a checkout")
