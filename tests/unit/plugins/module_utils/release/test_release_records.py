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
    assert run(tmp_path) == {"built": [], "running": [], "running_built": [], "release_built": False,
                             "releases": [], "instances": [], "in_use": []}
    assert R.read_releases(str(tmp_path / "none")).release_built is False  # no release asked about


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


def test_the_releases_are_the_real_directories_with_their_mtime_as_find_listed_them(tmp_path):
    a = release(tmp_path, "aaaa")
    b = release(tmp_path, "bbbb")
    os.utime(a, (1000.0, 1000.0))
    os.utime(b, (2000.0, 2000.0))
    os.symlink(a, tmp_path / "releases" / "link")  # a link to a release is not one
    (tmp_path / "releases" / "file").write_text("x")
    (tmp_path / "releases" / ".tmp-cccc").mkdir()  # hidden: find left it out, so does the prune
    assert run(tmp_path)["releases"] == [{"path": str(a), "mtime": 1000.0}, {"path": str(b), "mtime": 2000.0}]


def link(base, name, which, target):
    d = base / "instances" / name
    d.mkdir(parents=True, exist_ok=True)
    os.symlink(target, d / which)
    return str(d / which)


def test_each_instance_s_links_with_their_text_and_realpath(tmp_path):
    a = release(tmp_path, "aaaa")
    b = release(tmp_path, "bbbb")
    cur = link(tmp_path, "one", "current", a)
    prev = link(tmp_path, "one", "previous", "../../releases/bbbb")  # relative: from the link's directory
    (tmp_path / "instances" / "two").mkdir()
    (tmp_path / "instances" / "two" / "current").write_text("not a link")
    os.symlink(tmp_path / "instances" / "one", tmp_path / "instances" / "three")  # a link is no instance
    out = run(tmp_path)
    assert out["instances"] == [
        {"name": "one", "path": str(tmp_path / "instances" / "one"),
         "current": {"path": cur, "target": str(a), "resolved": str(a)},
         "previous": {"path": prev, "target": "../../releases/bbbb", "resolved": str(b)}},
        {"name": "two", "path": str(tmp_path / "instances" / "two"), "current": None, "previous": None}]
    assert out["in_use"] == [str(a), str(b)]


def test_in_use_is_every_link_of_every_instance_resolved_through_chains_each_once(tmp_path):
    a = release(tmp_path, "aaaa")
    b = release(tmp_path, "bbbb")
    c = release(tmp_path, "cccc")
    release(tmp_path, "dddd")
    link(tmp_path, "one", "current", a)
    link(tmp_path, "two", "current", "../one/current")  # a chain: followed to the release
    link(tmp_path, "two", "previous", "../../releases/./bbbb/")
    link(tmp_path, "gone", "previous", c)  # an instance the inventory now lists as absent: still protected
    link(tmp_path, "one", "rollback-pin", c)  # any link in an instance directory protects what it names
    link(tmp_path, "three", "current", tmp_path / "releases" / "vanished")
    assert run(tmp_path)["in_use"] == sorted([str(a), str(b), str(c), str(tmp_path / "releases" / "vanished")])


def test_in_use_is_spelled_as_the_releases_are_when_the_base_is_a_symlink(tmp_path):
    real = tmp_path / "data"
    a = release(real, "aaaa")
    release(real, "bbbb")
    link(real, "one", "previous", a)  # absolute, through the real path
    link(real, "one", "current", "../../releases/bbbb")
    os.symlink(real, tmp_path / "opt")  # an operator's /opt/dflash -> /data/dflash
    out = run(tmp_path / "opt")
    assert [r["path"] for r in out["releases"]] == [str(tmp_path / "opt" / "releases" / n) for n in ("aaaa", "bbbb")]
    assert out["in_use"] == [str(tmp_path / "opt" / "releases" / n) for n in ("aaaa", "bbbb")]
    assert out["instances"][0]["current"]["resolved"] == str(real / "releases" / "bbbb")
