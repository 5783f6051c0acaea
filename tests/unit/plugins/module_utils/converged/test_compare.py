"""The fast path's comparisons (module_utils/converged/compare.py): each difference a user would want
named is named, and equal readings give no reason."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils.converged import compare as C

KEY = {"collection": "c1", "vars": "v1", "artifacts": "a1"}


def test_same_key_no_reason_and_each_part_named():
    assert C.key_reasons(KEY, dict(KEY)) == []
    assert C.key_reasons(KEY, dict(KEY, vars="v2")) == [
        "the deploy's variables changed since the last completed deploy"]
    changed = C.key_reasons(KEY, {"collection": "c2", "vars": "v1", "artifacts": "a2"})
    assert len(changed) == 2 and "collection" in changed[0] and "artifacts" in changed[1]


def test_a_key_that_could_not_be_computed_never_matches():
    # an empty part (e.g. both sides missing) is not a match
    assert C.key_reasons({}, {}) != []
    assert C.key_reasons(None, KEY) != []


def test_record_versions():
    assert C.record_reasons(None) == ["no record of a completed deploy on this host"]
    assert C.record_reasons({"version": 0}) != []
    assert C.record_reasons({}) != []
    assert C.record_reasons({"version": C.RECORD_VERSION}) == []


def test_entry_reasons_name_the_path_and_what_changed():
    was = {"kind": "f", "mode": "0640", "uid": 0, "gid": 997, "size": 10, "mtime_ns": 1, "sha256": "x"}
    assert C.entry_reasons("/etc/dflash/a.env", was, dict(was)) == []
    assert C.entry_reasons("/etc/dflash/a.env", was, dict(was, mode="0644")) == ["/etc/dflash/a.env changed (mode)"]
    assert C.entry_reasons("/p", was, dict(was, sha256="y", size=11)) == ["/p changed (size, contents)"]
    assert C.entry_reasons("/p", was, {"kind": "absent"}) == ["/p is gone"]
    assert C.entry_reasons("/p", {"kind": "absent"}, was) == ["/p appeared"]
    link = {"kind": "l", "mode": "0777", "uid": 0, "gid": 0, "link": "../../releases/a"}
    assert C.entry_reasons("/cur", link, dict(link, link="../../releases/b")) == ["/cur changed (link target)"]


def test_entries_reasons_counts_a_path_missing_from_the_reading_as_gone():
    assert C.entries_reasons({"/a": {"kind": "d", "mode": "0755", "uid": 0, "gid": 0}}, {}) == ["/a is gone"]


def test_tree_reasons():
    assert C.tree_reasons({"/r": "s"}, {"/r": "s"}) == []
    assert C.tree_reasons({"/r": "s"}, {"/r": "t"}) == ["files of release /r changed since it was verified"]
    assert C.tree_reasons({"/r": "s"}, {"/r": None}) == ["release /r cannot be read"]


UNIT = {"LoadState": "loaded", "UnitFileState": "enabled", "FragmentPath": "/etc/systemd/system/x@.service",
        "DropInPaths": "/etc/systemd/system/x@a.service.d/devices.conf"}
RUNNING = dict(UNIT, ActiveState="active", SubState="running", NeedDaemonReload="no")


def test_unit_running_as_recorded():
    assert C.unit_reasons({"x@a.service": UNIT}, {"x@a.service": RUNNING}) == []


def test_unit_stopped_disabled_overridden_or_stale():
    assert C.unit_reasons({"u": UNIT}, {"u": dict(RUNNING, ActiveState="inactive", SubState="dead")}) == \
        ["u is inactive (dead), not running"]
    assert C.unit_reasons({"u": UNIT}, {"u": dict(RUNNING, UnitFileState="disabled")}) == ["u: UnitFileState changed"]
    extra = RUNNING["DropInPaths"] + " /etc/systemd/system/x@a.service.d/override.conf"
    assert C.unit_reasons({"u": UNIT}, {"u": dict(RUNNING, DropInPaths=extra)}) == ["u: DropInPaths changed"]
    assert C.unit_reasons({"u": UNIT}, {"u": dict(RUNNING, NeedDaemonReload="yes")}) == \
        ["u: its unit files changed on disk (systemd needs a daemon-reload)"]
    assert C.unit_reasons({"u": UNIT}, {}) == ["u: systemd gave no answer"]


ROWS = [["0", "GPU-a", "00000000:01:00.0", "580.95.05"], ["1", "GPU-b", "00000000:21:00.0", "580.95.05"]]


def test_gpus_same_gone_new_moved():
    assert C.gpu_reasons(ROWS, [list(r) for r in ROWS]) == []
    assert C.gpu_reasons(ROWS, None) == ["nvidia-smi gave no answer"]
    assert C.gpu_reasons(ROWS, ROWS[:1]) == ["GPU GPU-b is no longer listed"]
    assert C.gpu_reasons(ROWS, ROWS + [["2", "GPU-c", "00000000:41:00.0", "580.95.05"]]) == ["GPU GPU-c is new"]
    moved = C.gpu_reasons(ROWS, [ROWS[0], ["0", "GPU-b", "00000000:21:00.0", "580.95.05"]])
    assert len(moved) == 1 and moved[0].startswith("GPU GPU-b moved or the driver changed")
    driver = C.gpu_reasons(ROWS, [r[:3] + ["590.1"] for r in ROWS])
    assert driver and "GPU-a, GPU-b moved or the driver changed" in driver[0]


def test_accounts():
    was = {"user:sglang": [999, 997, "/var/lib/dflash", "/usr/sbin/nologin", []], "group:sglang": [997, []]}
    assert C.account_reasons(was, dict(was)) == []
    now = dict(was, **{"user:sglang": [999, 997, "/var/lib/dflash", "/usr/sbin/nologin", ["sudo"]]})
    assert C.account_reasons(was, now) == ["user sglang changed (its entry or groups)"]
    assert C.account_reasons(was, {"group:sglang": [997, []]}) == ["user sglang changed (gone)"]


def test_command_and_health():
    assert C.command_reason("a", "a", "the lock") is None
    assert C.command_reason("a", "b", "the lock") == "the lock resolves otherwise than at the last completed deploy"
    assert C.command_reason("a", None, "the lock") == "the lock could not be run again"
    assert C.health_reasons({"a": None, "b": "/health_generate answered 503"}) == \
        ["instance b: /health_generate answered 503"]


def test_the_record_keeps_a_command_digest_and_the_run_names_the_command():
    """Round 3, N2: the record keeps only the lock command's digest; a check compares this run's command with it."""
    lock = {"argv": ["/bin/bash", "-c", "uv pip compile -"], "stdin": "sglang==0.5.11", "env": {"UV_NO_CONFIG": "1"}}
    digest = C.command_digest(lock)
    assert len(digest) == 64 and C.command_digest(dict(lock, sha256="x")) == digest  # the output digest is apart
    assert C.command_digest(dict(lock, env={"UV_NO_CONFIG": "1", "PYTHONPATH": "/tmp"})) != digest
    assert C.command_digest(dict(lock, stdin="sglang==0.5.12")) != digest
    assert C.command_digest({}) is None and C.command_digest(None) is None
    assert C.command_mismatch(digest, lock, "the lock") is None
    assert C.command_mismatch(None, {}, "the lock") is None  # nothing recorded: nothing to run
    forged = dict(lock, argv=["/bin/sh", "-c", "id > /var/tmp/rt3-record-pwn"])
    assert C.command_mismatch(digest, forged, "the lock") == "the lock itself changed since the last completed deploy"
    assert C.command_mismatch(digest, {}, "the lock").startswith("the lock could not be named before the deploy")
