"""dflash_releases.py: what the host's releases were built from and which ones the instances run, in one read."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[4] / "roles" / "sglang_venv" / "files" / "dflash_releases.py"


def run(base, release="unknown"):
    request = {"base_dir": str(base), "release_dir": str(base / "releases" / release)}
    proc = subprocess.run([sys.executable, str(SCRIPT), json.dumps(request)], capture_output=True, text=True,
                          check=True)
    return json.loads(proc.stdout)


def release(base, rid, record=None, text=None):
    meta = base / "releases" / rid / ".dflash-release"
    meta.mkdir(parents=True)
    if record is not None or text is not None:
        (meta / "built.json").write_text(text if text is not None else json.dumps(record))
    return base / "releases" / rid


def instance(base, name, target):
    d = base / "instances" / name
    d.mkdir(parents=True)
    os.symlink(target, d / "current")


def test_a_bare_host_has_no_releases_and_nothing_running(tmp_path):
    assert run(tmp_path) == {"built": [], "running": [], "running_built": [], "release_built": False}


def test_built_releases_are_listed_sorted_with_their_text_and_an_unbuilt_one_is_not(tmp_path):
    release(tmp_path, "bbbb", {"release_id": "bbbb"})
    release(tmp_path, "aaaa", {"release_id": "aaaa"})
    release(tmp_path, "cccc")  # an interrupted build: no built.json
    out = run(tmp_path, "aaaa")
    assert [(Path(b["path"]).parts[-3], json.loads(b["text"])) for b in out["built"]] == [
        ("aaaa", {"release_id": "aaaa"}), ("bbbb", {"release_id": "bbbb"})]
    assert out["release_built"] is True
    assert run(tmp_path, "cccc")["release_built"] is False


def test_a_built_json_that_is_a_link_is_not_a_record_but_counts_as_built(tmp_path):
    release(tmp_path, "aaaa", {"release_id": "aaaa"})
    rel = release(tmp_path, "link")
    os.symlink(tmp_path / "releases" / "aaaa" / ".dflash-release" / "built.json",
               rel / ".dflash-release" / "built.json")
    out = run(tmp_path, "link")
    assert [Path(b["path"]).parts[-3] for b in out["built"]] == ["aaaa"]
    assert out["release_built"] is True  # as stat without following saw it: something is there


def test_an_unreadable_record_is_listed_without_text(tmp_path):
    release(tmp_path, "aaaa", text="x")
    path = tmp_path / "releases" / "aaaa" / ".dflash-release" / "built.json"
    path.write_bytes(b"\xff\xfe not utf-8")
    assert run(tmp_path)["built"] == [{"path": str(path), "text": None}]


def test_running_releases_absolute_and_relative_each_once_with_their_parsable_records(tmp_path):
    a = release(tmp_path, "aaaa", {"release_id": "aaaa", "spec": {"lock": "x==1"}})
    release(tmp_path, "bbbb", text="not json")
    instance(tmp_path, "one", a)
    instance(tmp_path, "two", "../../releases/aaaa")  # relative: taken from the link's directory
    instance(tmp_path, "three", tmp_path / "releases" / "bbbb")
    instance(tmp_path, "four", tmp_path / "releases" / "gone")
    (tmp_path / "instances" / "five").mkdir()  # no current link yet
    out = run(tmp_path)
    assert sorted(out["running"]) == sorted([str(a), str(tmp_path / "releases" / "bbbb"),
                                             str(tmp_path / "releases" / "gone")])
    assert out["running_built"] == [{"release_id": "aaaa", "spec": {"lock": "x==1"}}]
