"""releases_info as Ansible runs it: the answer at the top level of the result, the same in check mode."""
from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.modules import releases_info


def run_module(args, capsys, check=False):
    with patch_module_args(dict(args, _ansible_check_mode=check)):
        with pytest.raises(SystemExit):
            releases_info.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.mark.parametrize("check", [False, True])
def test_the_answer_is_the_result_and_nothing_changes(tmp_path, capsys, check):
    meta = tmp_path / "releases" / "aaaa" / ".dflash-release"
    meta.mkdir(parents=True)
    (meta / "built.json").write_text(json.dumps({"release_id": "aaaa", "spec": {"lock": "x==1"}}))
    (tmp_path / "instances" / "qwen").mkdir(parents=True)
    os.symlink("../../releases/aaaa", tmp_path / "instances" / "qwen" / "current")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = run_module({"base_dir": str(tmp_path), "release_dir": str(tmp_path / "releases" / "bbbb")}, capsys,
                        check=check)
    assert result["changed"] is False
    assert result["built"] == [{"path": str(meta / "built.json"),
                                "text": json.dumps({"release_id": "aaaa", "spec": {"lock": "x==1"}})}]
    assert result["running"] == [str(tmp_path / "releases" / "aaaa")]
    assert result["running_built"] == [{"release_id": "aaaa", "spec": {"lock": "x==1"}}]
    assert result["release_built"] is False
    assert [r["path"] for r in result["releases"]] == [str(tmp_path / "releases" / "aaaa")]
    assert result["instances"] == [{"name": "qwen", "path": str(tmp_path / "instances" / "qwen"),
                                    "current": {"path": str(tmp_path / "instances" / "qwen" / "current"),
                                                "target": "../../releases/aaaa",
                                                "resolved": str(tmp_path / "releases" / "aaaa")},
                                    "previous": None}]
    assert result["in_use"] == [str(tmp_path / "releases" / "aaaa")]
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_bare_host_and_base_dir_required(tmp_path, capsys):
    result = run_module({"base_dir": str(tmp_path / "none"), "release_dir": str(tmp_path / "none" / "x")}, capsys)
    assert result == dict(result, changed=False, built=[], running=[], running_built=[], release_built=False,
                          releases=[], instances=[], in_use=[])
    result = run_module({"base_dir": str(tmp_path)}, capsys)  # no release asked about (prune, audit)
    assert not result.get("failed")
    assert result["release_built"] is False
    result = run_module({"release_dir": str(tmp_path)}, capsys)
    assert result["failed"] is True and "base_dir" in result["msg"]
