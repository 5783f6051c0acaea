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
