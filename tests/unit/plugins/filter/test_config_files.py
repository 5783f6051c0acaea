"""stale_files: the configuration a run writes is what differs on the host, and nothing that differs is skipped."""
from __future__ import annotations

import hashlib

from ansible_collections.dflash.deploy.plugins.filter import config_files as mod

ENV = "SGLANG_PORT=\"30001\"\n"


def want(path, text, owner="root", group="sglang", mode="0640"):
    return {"path": path, "sha1": hashlib.sha1(text.encode()).hexdigest(), "owner": owner, "group": group,
            "mode": mode}


def found(path, text, owner="root", group="sglang", mode="0640"):
    """One file as ansible.builtin.find reports it with get_checksum: true."""
    return {"path": path, "checksum": hashlib.sha1(text.encode()).hexdigest(), "pw_name": owner, "gr_name": group,
            "mode": mode, "isreg": True, "islnk": False}


def test_a_file_that_is_what_the_run_would_write_is_not_written():
    assert mod.stale_files([want("/etc/dflash/a.env", ENV)], [found("/etc/dflash/a.env", ENV)]) == []


def test_missing_or_different_content_owner_group_or_mode_is_written():
    wanted = [want("/etc/dflash/%s.env" % n, ENV) for n in "abcdef"]
    on_host = [
        # a: missing (or a symlink, which find does not list as a file)
        found("/etc/dflash/b.env", ENV + "# edited by hand\n"),
        found("/etc/dflash/c.env", ENV, owner="sglang"),
        found("/etc/dflash/d.env", ENV, group="root"),
        found("/etc/dflash/e.env", ENV, mode="0644"),
        found("/etc/dflash/f.env", ENV),
    ]
    assert mod.stale_files(wanted, on_host) == ["/etc/dflash/%s.env" % n for n in "abcde"]


def test_files_find_reports_that_the_run_does_not_manage_are_ignored():
    on_host = [found("/etc/dflash/a.env", ENV), found("/etc/dflash/a.env.123.2026-12-01@10:00:00~", "old"),
               "not a file entry", {"checksum": "x"}]
    assert mod.stale_files([want("/etc/dflash/a.env", ENV)], on_host) == []
    assert mod.stale_files([], on_host) == [] and mod.stale_files(None, None) == []
    assert mod.stale_files([want("/etc/dflash/a.env", ENV)], None) == ["/etc/dflash/a.env"]


# --- started_before_config: a running process older than the files it starts from -------------------

SHOW = """Id=sglang-dflash@a.service
ActiveState=active
ExecMainStartTimestamp=@1000

ExecMainStartTimestamp=@1000
Id=sglang-dflash@b.service
ActiveState=active

Id=sglang-dflash@c.service
ActiveState=inactive
ExecMainStartTimestamp=

Id=sglang-dflash@d.service
ActiveState=active
ExecMainStartTimestamp=Sun 2026-12-06 18:00:00 UTC
"""
BASE = "/opt/dflash"


def mtime(path, when):
    return {"path": path, "mtime": when}


def link(name, when):
    return {"item": {"name": name}, "stat": {"exists": True, "islnk": True, "mtime": when}}


def test_the_unit_show_output_is_read_by_unit_with_the_start_in_seconds_or_unknown():
    assert mod.parse_unit_show(SHOW) == {
        "sglang-dflash@a.service": {"active": True, "started": 1000, "reload": False},
        "sglang-dflash@b.service": {"active": True, "started": 1000, "reload": False},
        "sglang-dflash@c.service": {"active": False, "started": None, "reload": False},
        "sglang-dflash@d.service": {"active": True, "started": None, "reload": False},   # an older systemd's format
    }
    assert mod.parse_unit_show("") == {}


def test_a_killed_runs_env_file_drop_in_or_current_is_newer_than_the_running_process():
    found = [mtime("/etc/dflash/a.env", 1060.5), mtime("/etc/dflash/b.env", 900),
             mtime("/etc/systemd/system/sglang-dflash@b.service.d/devices.conf", 1000.9),   # the same second
             mtime("/etc/dflash/c.env", 5000), mtime("/etc/dflash/d.env", 5000)]
    out = mod.started_before_config(SHOW, found, [link("a", 800), link("b", 1200.0)], list("abcde"), "/etc/dflash",
                                    BASE)
    assert out == [
        {"name": "a", "started": 1000, "written": 1060.5, "paths": ["/etc/dflash/a.env"]},
        {"name": "b", "started": 1000, "written": 1200.0, "paths": [BASE + "/instances/b/current"]},
    ]


def test_a_shared_file_newer_than_the_start_restarts_every_instance_started_before_it():
    found = [mtime(BASE + "/bin/sglang-dflash-launch", 999), mtime("/etc/systemd/system/sglang-dflash@.service", 1500)]
    out = mod.started_before_config(SHOW, found, [], ["a", "b"], "/etc/dflash", BASE)
    assert [(e["name"], e["paths"]) for e in out] == [("a", ["/etc/systemd/system/sglang-dflash@.service"]),
                                                      ("b", ["/etc/systemd/system/sglang-dflash@.service"])]


def test_files_older_than_the_start_or_within_a_second_of_it_restart_nothing():
    found = [mtime("/etc/dflash/a.env", 1001.0), mtime(BASE + "/bin/sglang-dflash-launch", 10)]
    assert mod.started_before_config(SHOW, found, [link("a", 1000.7)], ["a"], "/etc/dflash", BASE) == []
    # nothing read (check mode, or systemd without --timestamp=unix): nothing decided
    assert mod.started_before_config("", found, [], ["a"], "/etc/dflash", BASE) == []
    assert mod.started_before_config(SHOW, [], [], ["a"], "/etc/dflash", BASE) == []


def test_a_unit_systemd_has_not_read_again_restarts_whatever_its_start_time():
    """Round 3's M5: the unit template changed without a reload, then the server was killed and systemd
    started it again from the old unit: its start is newer than every file, but it runs the old unit."""
    show = ("Id=sglang-dflash@a.service\nActiveState=active\nExecMainStartTimestamp=@2000\nNeedDaemonReload=yes\n\n"
            "Id=sglang-dflash@b.service\nActiveState=active\nExecMainStartTimestamp=@2000\nNeedDaemonReload=no\n")
    found = [mtime("/etc/systemd/system/sglang-dflash@.service", 1500), mtime("/etc/dflash/a.env", 900)]
    out = mod.started_before_config(show, found, [], ["a", "b"], "/etc/dflash", BASE)
    assert out == [{"name": "a", "started": 2000, "written": 2000, "paths": [mod.NOT_RELOADED]}]
    assert "NeedDaemonReload=yes" in mod.NOT_RELOADED
