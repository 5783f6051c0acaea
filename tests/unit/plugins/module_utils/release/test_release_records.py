"""release/records.py (releases_info): what the host's releases were built from and which ones the
instances run, in one read."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.dflash.deploy.plugins.module_utils.release import records as R


def run(base, release="unknown"):
    """The answer as releases_info returns it, through JSON as Ansible passes it on."""
    return json.loads(json.dumps(R.read_releases(str(base), str(base / "releases" / release)).as_dict()))


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


def test_a_fifo_or_a_device_in_a_record_s_place_is_no_record_and_no_hang(tmp_path):
    a = release(tmp_path, "aaaa")
    os.mkfifo(a / ".dflash-release" / "built.json")  # lstat: not a regular file, so not listed
    b = release(tmp_path, "bbbb")
    os.symlink("/dev/zero", b / ".dflash-release" / "built.json")  # followed for a running release: refused
    instance(tmp_path, "one", a)
    instance(tmp_path, "two", b)
    out = run(tmp_path, "aaaa")
    assert out["built"] == [] and out["running_built"] == []
    assert out["running"] == [str(a), str(b)]
    assert out["release_built"] is True
    assert R.read_text(str(a / ".dflash-release" / "built.json")) is None
