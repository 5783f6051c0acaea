# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which configuration files a run has to write: the rest are already what it would write.

    {{ wanted | dflash.deploy.stale_files(found.files) }}   the paths to write
    {{ show.stdout | dflash.deploy.started_before_config(found.files, current.results, names,
                                                        config_dir, base_dir) }}
                                                         the running instances whose files are newer

``wanted``: one entry per file the role manages, rendered on the controller:
``{"path", "sha1", "owner", "group", "mode"}`` (sha1 of the exact bytes, mode as "0644").
``found``: the ``files`` of one ``ansible.builtin.find`` over their directories with
``get_checksum: true`` (its default ``file_type: file`` lists no symlink, so a link where a file
belongs counts as missing). A file is stale when it is missing, or its content, owner, group or mode
differs: exactly what the template and copy modules would change. A stale file is written by its
own task, which still compares and reports by itself, so a wrong answer here can cost a write, never
skip one that differs: the skip needs the same sha1 as the file on the host.
"""
from __future__ import annotations

KEYS = (("sha1", "checksum"), ("owner", "pw_name"), ("group", "gr_name"), ("mode", "mode"))


def stale_files(wanted, found) -> list:
    """The paths of ``wanted`` whose file on the host differs from it (see the module docstring)."""
    on_host = {}
    for entry in found or []:
        if isinstance(entry, dict) and entry.get("path"):
            on_host[entry["path"]] = entry
    out = []
    for want in wanted or []:
        have = on_host.get(want["path"])
        if have is None or any(have.get(theirs) != want.get(ours) for ours, theirs in KEYS):
            out.append(want["path"])
    return out


# A process started in the same second as the write it follows shows a start up to a second earlier
# (systemd prints whole seconds with --timestamp=unix): a file counts as newer only beyond that.
SLACK_SECONDS = 1.0
NOT_RELOADED = "its unit files, which systemd has not read again since they changed (NeedDaemonReload=yes)"


def parse_unit_show(text) -> dict:
    """``systemctl show --timestamp=unix -p Id -p ActiveState -p ExecMainStartTimestamp -p NeedDaemonReload
    <units>``, by unit.

    One block per unit, blank lines between, ``Key=value`` lines in any order. The start time is
    ``@<seconds since the epoch>`` (systemd 248 and later, ``--timestamp=unix``), or empty for a unit
    that never started; anything else (an older systemd's formatted time) reads as None: unknown.
    """
    units = {}
    for block in (text or "").split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if not props.get("Id"):
            continue
        stamp = props.get("ExecMainStartTimestamp", "")
        started = int(stamp[1:]) if stamp.startswith("@") and stamp[1:].isdigit() else None
        units[props["Id"]] = {"active": props.get("ActiveState") == "active", "started": started,
                              "reload": props.get("NeedDaemonReload") == "yes"}
    return units


def started_before_config(show, found, current, names, config_dir, base_dir) -> list:
    """The running instances whose process started before one of the files it starts from last changed.

    ``show``: what ``parse_unit_show`` reads. ``found``: the ``files`` of config_plan.yml's find
    (``path``, ``mtime``), before this run writes. ``current``: the results of switch.yml's stat of
    each instance's ``current`` link (``follow: false``, so ``stat.mtime`` is the link's own, the time
    it was pointed), before the flip. An instance starts from its env file, its drop-in, the launcher,
    the unit template (read by systemd at its last reload before the start) and the release ``current``
    names: when one of them is newer than the start, the process runs what came before, as after a run
    that wrote them and was killed before its restart. Each entry: ``name``, ``started``, ``written``
    (the newest of those times) and ``paths`` (the files newer than the start). An instance whose start
    is unknown is left out: nothing is decided without a time. An instance whose unit files changed since
    systemd last read them (``NeedDaemonReload=yes``) runs what came before too, whatever its start time:
    a process that started again on its own (a crash, the service user's kill) started from the old unit
    (round 3's M5); it restarts as well, after the handler's daemon-reload.
    """
    units = parse_unit_show(show) if isinstance(show, str) else dict(show or {})
    mtimes = {}
    for entry in found or []:
        if isinstance(entry, dict) and entry.get("path") and entry.get("mtime") is not None:
            mtimes[entry["path"]] = float(entry["mtime"])
    links = {}
    for result in current or []:
        stat = (result or {}).get("stat") or {}
        name = ((result or {}).get("item") or {}).get("name")
        if name and stat.get("islnk") and stat.get("mtime") is not None:
            links[name] = float(stat["mtime"])
    shared = [base_dir + "/bin/sglang-dflash-launch", "/etc/systemd/system/sglang-dflash@.service"]
    out = []
    for name in names or []:
        unit = units.get("sglang-dflash@%s.service" % name) or {}
        if not unit.get("active") or unit.get("started") is None:
            continue
        own = ["%s/%s.env" % (config_dir, name), "/etc/systemd/system/sglang-dflash@%s.service.d/devices.conf" % name]
        times = [(path, mtimes[path]) for path in own + shared if path in mtimes]
        if name in links:
            times.append(("%s/instances/%s/current" % (base_dir, name), links[name]))
        newer = [(path, when) for path, when in times if when > unit["started"] + SLACK_SECONDS]
        if unit.get("reload"):
            newer.append((NOT_RELOADED, max([when for _p, when in times] + [unit["started"]])))
        if newer:
            out.append({"name": name, "started": unit["started"], "written": max(when for _p, when in newer),
                        "paths": [path for path, _w in newer]})
    return out


class FilterModule:
    def filters(self):
        return {"stale_files": stale_files, "started_before_config": started_before_config}
