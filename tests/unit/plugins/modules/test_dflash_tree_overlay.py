"""The dflash_tree_overlay module shell: check mode writes nothing, diff, changed, fail_json's one line."""
from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.modules import dflash_tree_overlay
from dflash_tree_support import BASE, TREE, make_release, on_disk, release_paths, snapshot, write_tar


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            dflash_tree_overlay.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def _args(venv, site, tar, **extra):
    manifest, marker = release_paths(venv)
    return dict(tar=str(tar), site_packages=str(site), manifest=str(manifest), verified_marker=str(marker), **extra)


EXPECTED = ["replace sglang/srt/layers/sampler.py", "add sglang/srt/models/mimo_v2.py",
            "add sglang/srt/speculative/dflash_worker.py", "replace sglang/version.py",
            "remove sglang/srt/models/mimo_v2_flash.py", "record", "manifest"]


def test_check_mode_writes_nothing_and_reports_what_a_run_does(tmp_path, capsys):
    venv, site, tar = make_release(tmp_path)
    before = snapshot(tmp_path)
    res = run_module(_args(venv, site, tar, _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert res["changed"] is True and "failed" not in res
    assert res["changes"] == EXPECTED and res["marker_removed"] is False
    assert res["diff"] == {"prepared": "".join(line + "\n" for line in EXPECTED)}
    assert snapshot(tmp_path) == before  # not a byte, not a marker, not a temporary file
    res = run_module(_args(venv, site, tar), capsys)
    assert res["changed"] is True and res["changes"] == EXPECTED and res["marker_removed"] is True
    assert "diff" not in res and res["files"] == len(TREE)
    assert res["record"] == str(site / "sglang-0.5.9.dist-info" / "RECORD")
    assert on_disk(site) == TREE
    res = run_module(_args(venv, site, tar, _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert res["changed"] is False and res["changes"] == [] and "diff" not in res
    res = run_module(_args(venv, site, tar), capsys)
    assert res["changed"] is False and res["changes"] == []


def test_drift_in_check_mode_is_reported_and_left(tmp_path, capsys):
    venv, site, tar = make_release(tmp_path)
    run_module(_args(venv, site, tar), capsys)
    (site / "sglang" / "srt" / "speculative" / "dflash_worker.py").write_text("edited\n")
    (venv / ".dflash-release" / "verified.json").write_text("{}")
    before = snapshot(tmp_path)
    res = run_module(_args(venv, site, tar, _ansible_check_mode=True), capsys)
    assert res["changed"] is True and res["changes"] == ["drift sglang/srt/speculative/dflash_worker.py"]
    assert snapshot(tmp_path) == before


def test_a_refused_tar_fails_with_one_line_and_changes_nothing(tmp_path, capsys):
    venv, site, _tar = make_release(tmp_path)
    bad = write_tar(tmp_path / "bad.tar", {"sglang/x.py": "x", "../etc/passwd": "x"})
    res = run_module(_args(venv, site, bad), capsys)
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"] == "the tar holds ../etc/passwd, outside sglang/: refused"
    assert on_disk(site) == BASE and (venv / ".dflash-release" / "verified.json").exists()
    res = run_module(_args(venv, tmp_path / "none", bad), capsys)
    assert res["failed"] is True and res["msg"] == "site-packages %s does not exist" % (tmp_path / "none")
    res = run_module(_args(venv, site, tmp_path / "missing.tar"), capsys)
    assert res["failed"] is True and res["msg"].startswith("cannot read the tar %s" % (tmp_path / "missing.tar"))
