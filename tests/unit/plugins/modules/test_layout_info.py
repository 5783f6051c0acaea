"""layout_info as Ansible runs it: the request as typed options, the answer at the top level, nothing changed."""
from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.modules import layout_info

NOBODY = 65534


def run_module(args, capsys, check=False):
    with patch_module_args(dict(args, _ansible_check_mode=check)):
        with pytest.raises(SystemExit):
            layout_info.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def _tree(tmp_path):
    os.chmod(tmp_path, 0o755)
    for parent in [tmp_path, *tmp_path.parents]:
        if parent.stat().st_mode & 0o002 and not parent.stat().st_mode & 0o1000:
            pytest.skip(f"{parent} is writable by others: the tree above the test is not root's")
    base, state = tmp_path / "opt", tmp_path / "lib"
    for d in (base, base / "releases", state):
        d.mkdir()
    return base, state


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
@pytest.mark.parametrize("check", [False, True])
def test_the_answer_is_the_result_and_nothing_changes(tmp_path, capsys, monkeypatch, check):
    base, state = _tree(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    canary = tmp_path / "canary"
    canary.mkdir()
    (state / "qwen").symlink_to(canary)
    os.lchown(state / "qwen", NOBODY, -1)
    os.chmod(base / "releases", 0o777)
    args = {"service_user": "nobody", "service_group": "nogroup",
            "root_dirs": [str(base)], "service_parents": [str(state)], "shared_dirs": [str(base / "releases")],
            "release_dirs": [str(base / "releases")], "service_dirs": [str(state / "qwen")],
            "keep": [{"path": str(base), "group": "root", "mode": "0755"},
                     {"path": str(base / "releases"), "group": "root", "mode": 0o755},
                     {"path": str(tmp_path / "missing"), "group": "root", "mode": "0700"}]}
    result = run_module(args, capsys, check=check)
    assert result["changed"] is False
    assert result["problems"] == [
        f"host layout: {state / 'qwen'} is a symlink (-> {canary}) made by nobody: root would follow it and hand "
        "its target to the service user; remove it and check what it points at"]
    assert result["loose"] == [str(base / "releases")]
    assert result["unkept"] == [str(base / "releases"), str(tmp_path / "missing")]
    assert (base / "releases").stat().st_mode & 0o7777 == 0o777 and not (tmp_path / "missing").exists()
    assert (state / "qwen").is_symlink()


def test_the_path_lists_default_to_empty_and_the_service_user_is_required(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "")
    result = run_module({"service_user": "nobody", "service_group": "nogroup"}, capsys)
    assert result == dict(result, changed=False, problems=[], loose=[], unkept=[])
    result = run_module({"service_group": "nogroup"}, capsys)
    assert result["failed"] is True and "service_user" in result["msg"]


def test_a_kept_mode_that_is_not_octal_fails_naming_the_path(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "")
    result = run_module({"service_user": "nobody", "service_group": "nogroup",
                         "keep": [{"path": str(tmp_path), "group": "root", "mode": "u=rwx"}]}, capsys)
    assert result["failed"] is True
    assert result["msg"] == f"keep {tmp_path}: mode 'u=rwx' is not an octal mode such as '0755'"
