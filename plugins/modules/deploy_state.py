#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: deploy_state
short_description: Record what a completed deploy converged to, and say whether the host still is exactly that
version_added: "0.1.0"
description:
  - With O(state=recorded), after a deploy completed, reads what the host shows now and keeps it in O(path)
    (root's, mode 0600, written through a new temporary file) with the controller's O(key) of the deploy's
    inputs. It records each named file's type, mode, owner, group, link target, size, modification time and
    (up to 1 MiB) sha256; each named directory's
    type, mode, owner and group; each release tree's fingerprint (the one verification records); what
    C(systemctl show) says of each unit; the GPUs nvidia-smi lists (index, UUID, bus id, driver version);
    the service accounts; and the sha256 of the lock command and of what it prints (never the command itself).
  - With O(state=check) (the default), compares the host with that record and says whether it is converged,
    and if not, why. It is converged when O(key) equals the recorded key, no run holds or waits for the host
    lock, every recorded file, directory, account and unit property is as recorded, every unit is active and
    running with no pending daemon-reload, nvidia-smi lists the same GPUs, each release tree has the recorded
    fingerprint, each instance answers C(/health_generate) and names its model on C(/v1/models), and this run's
    lock command (O(command)) is the recorded one and prints what it printed. Cheap comparisons run first; the
    first kind that differs ends the check, and its reasons are returned. It reads only and runs in check mode.
  - With O(state=absent), removes the record, so that the next run takes the full path.
  - The record is trusted only when its directory and every directory above it are root's, real directories
    that no group or other user may write, and the record is a regular file of root's that no group or other
    user may write. Otherwise a check answers not converged naming the path, and writing or removing is refused
    in one line before anything changes. A missing directory is made root's, mode 0700; an existing one is
    never changed.
  - Standard library and ansible-core's module_utils only.
author:
  - dflash.deploy contributors (@dflash)
options:
  path:
    description:
      - The record. Its directory is made root's, mode 0700, when it is missing; an existing one is used only when
        it is root's and writable by no group or other user, and is never changed. The deploy_state role keeps
        it in C(/var/lib/dflash-deploy).
    type: path
    default: /var/lib/dflash-deploy/converged.json
  state:
    description: V(check) compares, V(recorded) writes the record, V(absent) removes it.
    type: str
    choices: [check, recorded, absent]
    default: check
  key:
    description:
      - The controller's digests of the deploy's inputs (C(collection), C(vars), C(artifacts)); the
        C(dflash.deploy.deploy_key) filter computes them. Required with O(state=check) and O(state=recorded).
    type: dict
  release:
    description: The release the instances run (recorded, and returned by a check).
    type: str
    default: ""
  instances:
    description:
      - The instances the deploy left running; each is checked for health, and returned by a check for the report.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The instance's name.
        type: str
        required: true
      port:
        description: Its port on 127.0.0.1.
        type: int
        required: true
      served_model_name:
        description: The model name C(/v1/models) must list.
        type: str
        required: true
      env_file:
        description: Its env file, which holds the API key the probes send.
        type: path
        default: ""
  files:
    description: Files and links to record (a missing one is recorded as absent).
    type: list
    elements: path
    default: []
  dirs:
    description: Directories to record by type, mode, owner and group.
    type: list
    elements: path
    default: []
  trees:
    description: Release directories to record by their fingerprint.
    type: list
    elements: path
    default: []
  units:
    description: systemd units that must stay active and running, with the same unit files and enablement.
    type: list
    elements: str
    default: []
  users:
    description: Accounts whose uid, group, home, shell and other groups are recorded.
    type: list
    elements: str
    default: []
  groups:
    description: Groups whose gid and members are recorded.
    type: list
    elements: str
    default: []
  gpus:
    description: Record the GPUs as nvidia-smi lists them.
    type: bool
    default: true
  command:
    description:
      - A read-only command whose output the deploy depended on (the package lock, C(uv pip compile) against
        the index), as C(argv), C(stdin) and C(env). The record keeps the sha256 of the command and the sha256 of
        its output (trailing newlines removed, as the command module returns it); C(sha256), when given, is that
        digest of the output the deploy itself read, kept instead of running the command again.
      - With O(state=check), this run's command (the role computes it on the controller from the deploy's
        variables). The check runs it only when its sha256 is the recorded one and compares its output; a record
        that kept a command digest and a check given none or another command is not converged. The command a
        check runs never comes from the record.
    type: dict
  health_timeout:
    description: Seconds each health probe of a check may take.
    type: int
    default: 30
notes:
  - The record holds no secret. An env file is kept as its sha256, the lock command as its sha256.
  - The module logs none of its arguments to the journal; the credentials of an index or proxy URL in the
    command's C(env) are masked in all it returns.
  - A write by root that keeps a file's size and puts its old modification time back is not seen in a release
    tree (as for M(dflash.deploy.release_fingerprint)); configuration files are compared by contents.
seealso:
  - module: dflash.deploy.release_fingerprint
"""

EXAMPLES = r"""
- name: Is the host still what the last completed deploy left?
  dflash.deploy.deploy_state:
    key: "{{ hostvars[inventory_hostname] | dflash.deploy.deploy_key }}"
  register: converged

- name: Record what the deploy converged to
  dflash.deploy.deploy_state:
    state: recorded
    key: "{{ deploy_key }}"
    release: fc72249c303485d4
    instances:
      - {name: qwen3-8b, port: 30001, served_model_name: qwen3-8b-dflash, env_file: /etc/dflash/qwen3-8b.env}
    files: [/etc/dflash/qwen3-8b.env, /opt/dflash/instances/qwen3-8b/current]
    trees: [/opt/dflash/releases/fc72249c303485d4]
    units: [sglang-dflash@qwen3-8b.service]
    users: [sglang]
"""

RETURN = r"""
converged:
  description: True when the host is what the record describes and every instance answers (O(state=check)).
  returned: always
  type: bool
reasons:
  description: Why the host is not converged, one line each; empty when it is.
  returned: always
  type: list
  elements: str
  sample: ["/etc/dflash/qwen3-8b.env changed (size, modification time, contents)"]
release:
  description: The recorded release (O(state=check)), or the one recorded (O(state=recorded)).
  returned: always
  type: str
instances:
  description: The recorded instances (name, port, served_model_name).
  returned: always
  type: list
  elements: dict
checks:
  description: How many recorded things a check compared before it answered.
  returned: always
  type: int
recorded_at:
  description: When the record was written (seconds since the epoch), 0 without one.
  returned: always
  type: float
elapsed:
  description: Seconds the module took.
  returned: always
  type: float
"""

import os
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils import uv_env as U
    from ansible_collections.dflash.deploy.plugins.module_utils.converged import compare as C
    from ansible_collections.dflash.deploy.plugins.module_utils.converged import observe as O
    from ansible_collections.dflash.deploy.plugins.module_utils.converged import store as S
    from ansible_collections.dflash.deploy.plugins.module_utils.host import layout as L
    from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import find_program
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()

LOCK = "the package lock (uv pip compile)"


def _run_command(command):
    """output sha256 of this run's lock command (argv, stdin, env given by the run, never by the record)."""
    return O.command_sha256(command.get("argv") or [], command.get("stdin") or "", command.get("env") or {})


def observe_all(params, nvidia_smi):
    """Everything a record keeps, read now (state=recorded)."""
    instances = [dict((k, i.get(k)) for k in ("name", "port", "served_model_name", "env_file"))
                 for i in params["instances"]]
    command = params["command"] or {}
    return {
        "version": C.RECORD_VERSION,
        "key": params["key"],
        "release": params["release"],
        "instances": instances,
        "files": dict((p, O.path_entry(p)) for p in params["files"]),
        "dirs": dict((p, O.path_entry(p)) for p in params["dirs"]),
        "accounts": dict([("user:" + u, O.account("user", u)) for u in params["users"]]
                         + [("group:" + g, O.account("group", g)) for g in params["groups"]]),
        "units": dict((u, dict((p, s.get(p)) for p in C.UNIT_KEPT))
                      for u, s in O.unit_states(params["units"]).items()),
        "gpus": O.gpu_rows(nvidia_smi) if params["gpus"] else None,
        "trees": dict((p, O.tree_sha256(p)) for p in params["trees"]),
        "host_config": host_config(),
        "command": {"digest": C.command_digest(command),
                    "sha256": command.get("sha256") or (_run_command(command) if command.get("argv") else None)},
        "recorded_at": time.time(),
    }


def host_config():
    """The host's own uv and pip configuration files that exist: [[path, 'uv' or 'pip']]."""
    return [list(f) for f in U.host_config_on_host()]


def control_reasons(record):
    """The full path's first read, before this check runs anything: each directory on root's PATH, and each
    above what the record keeps, root's and not writable by others (docs/security.md S7, S8); and the host's
    own uv and pip configuration as the recorded deploy found it: a file that appeared since (which the
    deploy's uv would ignore) sends the run to the full path, whose preflight refuses it or, when told to,
    warns and records it."""
    accounts = [n.split(":", 1) for n in record.get("accounts") or {}]
    reading = L.read_layout(service_user=next((n for k, n in accounts if k == "user"), ""),
                            service_group=next((n for k, n in accounts if k == "group"), ""),
                            path_env=os.environ.get("PATH", ""),
                            parents_of=sorted(record.get("dirs") or {}) + sorted(record.get("files") or {}))
    now, then = host_config(), record.get("host_config") or []
    added = [f for f in now if f not in then]
    gone = [f[0] for f in then if f not in now]
    config = U.host_config_error(added) if added else (
        "%s: gone since the last deploy, which found it" % ", ".join(gone) if gone else "")
    return list(reading.problems) + ([config] if config else [])


def _command_reasons(recorded, command):
    """Whether this run's lock command prints what the recorded deploy's printed: it runs only when its
    digest is the recorded one (the record names no command to run)."""
    recorded = recorded if isinstance(recorded, dict) else {}
    if not recorded.get("digest"):
        return []
    mismatch = C.command_mismatch(recorded["digest"], command, LOCK)
    if mismatch:
        return [mismatch]
    reason = C.command_reason(recorded.get("sha256"), _run_command(command), LOCK)
    return [reason] if reason else []


def check(record, key, nvidia_smi, health_timeout, command=None):
    """(reasons, checks compared): stops at the first kind of thing that differs. ``command``: this run's
    lock command (the record keeps only its digest and the digest of its output)."""
    steps = [
        ("key", lambda: C.key_reasons(record.get("key"), key)),
        ("control", lambda: control_reasons(record)),
        ("lock", lambda: ["another run holds or waits for the host lock (%s)" % ", ".join(O.lock_tokens())]
         if O.lock_tokens() else []),
        ("files", lambda: C.entries_reasons(record.get("files") or {},
                                            dict((p, O.path_entry(p)) for p in record.get("files") or {}))
         + C.entries_reasons(record.get("dirs") or {}, dict((p, O.path_entry(p)) for p in record.get("dirs") or {}))),
        ("accounts", lambda: C.account_reasons(record.get("accounts") or {}, dict(
            (n, O.account(*n.split(":", 1))) for n in record.get("accounts") or {}))),
        ("units", lambda: C.unit_reasons(record.get("units") or {}, O.unit_states(sorted(record.get("units") or {})))),
        ("gpus", lambda: C.gpu_reasons(record["gpus"], O.gpu_rows(nvidia_smi)) if record.get("gpus") is not None
         else []),
        ("trees", lambda: C.tree_reasons(record.get("trees") or {},
                                         dict((p, O.tree_sha256(p)) for p in record.get("trees") or {}))),
        ("health", lambda: C.health_reasons(dict(
            (i["name"], O.health("http://127.0.0.1:%s" % i["port"], i["served_model_name"], i.get("env_file"),
                                 health_timeout, unit="sglang-dflash@%s.service" % i["name"]))
            for i in record.get("instances") or []))),
        ("command", lambda: _command_reasons(record.get("command"), command or {})),
    ]
    done = 0
    for _name, step in steps:
        reasons = step()
        done += 1
        if reasons:
            return reasons, done
    return [], done


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/dflash-deploy/converged.json"),
            state=dict(type="str", default="check", choices=["check", "recorded", "absent"]),
            key=dict(type="dict", no_log=False),
            release=dict(type="str", default=""),
            instances=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                port=dict(type="int", required=True),
                served_model_name=dict(type="str", required=True),
                env_file=dict(type="path", default=""),
            )),
            files=dict(type="list", elements="path", default=[]),
            dirs=dict(type="list", elements="path", default=[]),
            trees=dict(type="list", elements="path", default=[]),
            units=dict(type="list", elements="str", default=[]),
            users=dict(type="list", elements="str", default=[]),
            groups=dict(type="list", elements="str", default=[]),
            gpus=dict(type="bool", default=True),
            command=dict(type="dict"),
            health_timeout=dict(type="int", default=30),
        ),
        required_if=[("state", "check", ["key"]), ("state", "recorded", ["key"])],
        supports_check_mode=True,
        no_log=True,  # the command's env may hold index or proxy credentials: no journal line of the arguments
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    # masked in all the module returns (the invocation shown at -vvv among it)
    module.no_log_values.update(U.secrets((module.params["command"] or {}).get("env") or {}))
    start = time.monotonic()
    p = module.params
    path = p["path"]
    nvidia_smi = find_program("nvidia-smi") or ""  # by absolute path in the system's directories, never PATH
    result = dict(changed=False, converged=False, reasons=[], release="", instances=[], checks=0, recorded_at=0.0)

    problem = S.dir_problem(os.path.dirname(path))
    if problem and p["state"] != "check":
        module.fail_json(msg="deploy record refused, nothing was changed: %s" % problem, **result)

    if p["state"] == "absent":
        result["changed"] = os.path.lexists(path)
        if result["changed"] and not module.check_mode:
            os.unlink(path)
        result["reasons"] = ["the record was removed"]
        module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)

    if p["state"] == "recorded":
        record = observe_all(p, nvidia_smi)
        result.update(changed=True, release=record["release"], recorded_at=record["recorded_at"],
                      instances=[dict((k, i[k]) for k in ("name", "port", "served_model_name"))
                                 for i in record["instances"]])
        if not module.check_mode:
            try:
                S.write_record(path, record)
            except (OSError, S.RecordError) as exc:
                module.fail_json(msg="could not write the deploy record %s: %s" % (path, exc), **result)
        module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)

    try:
        record = S.read_record(path)
        reasons = C.record_reasons(record)
    except S.RecordError as exc:
        record, reasons = None, [str(exc)]
    checks = 0
    if not reasons:
        reasons, checks = check(record, p["key"], nvidia_smi, p["health_timeout"], p["command"])
    if record:
        result.update(release=record.get("release") or "", recorded_at=record.get("recorded_at") or 0.0,
                      instances=[dict((k, i.get(k)) for k in ("name", "port", "served_model_name"))
                                 for i in record.get("instances") or []])
    result.update(converged=not reasons, reasons=reasons, checks=checks)
    module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)


if __name__ == "__main__":
    main()
