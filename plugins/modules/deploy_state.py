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
    (root's, mode 0600) with the controller's O(key) of the deploy's inputs. It records each named file's type,
    mode, owner, group, link target, size, modification time and (up to 1 MiB) sha256; each named directory's
    type, mode, owner and group; each release tree's fingerprint (the one verification records); what
    C(systemctl show) says of each unit; the GPUs nvidia-smi lists (index, UUID, bus id, driver version);
    the service accounts; and the sha256 of what the lock command prints.
  - With O(state=check) (the default), compares the host with that record and says whether it is converged,
    and if not, why. It is converged when O(key) equals the recorded key, no run holds or waits for the host
    lock, every recorded file, directory, account and unit property is as recorded, every unit is active and
    running with no pending daemon-reload, nvidia-smi lists the same GPUs, each release tree has the recorded
    fingerprint, each instance answers C(/health_generate) and names its model on C(/v1/models), and the lock
    command prints what it printed. Cheap comparisons run first; the first kind that differs ends the check,
    and its reasons are returned. It reads only and runs in check mode.
  - With O(state=absent), removes the record, so that the next run takes the full path.
  - Standard library and ansible-core's module_utils only.
author:
  - dflash.deploy contributors (@dflash)
options:
  path:
    description: The record. Its directory is made root's, mode 0700, when the record is written.
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
        the index), as C(argv), C(stdin) and C(env). A check runs it again and compares the sha256 of its output
        (trailing newlines removed, as the command module returns it). C(sha256), when given, is that digest of
        the output the deploy itself read, and the record keeps it instead of running the command again.
    type: dict
  health_timeout:
    description: Seconds each health probe of a check may take.
    type: int
    default: 30
notes:
  - The record holds no secret. An env file is kept as its sha256, the lock command's environment as
    given (uv's settings).
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

import json
import os
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.converged import compare as C
    from ansible_collections.dflash.deploy.plugins.module_utils.converged import observe as O
    from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()

MAX_RECORD_BYTES = 16 << 20


def _read_record(path):
    try:
        return json.loads(read_regular(path, MAX_RECORD_BYTES, nofollow=True).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def _command_digest(command):
    command = command or {}
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
        "command": {"argv": command.get("argv") or [], "stdin": command.get("stdin") or "",
                    "env": command.get("env") or {},
                    "sha256": command.get("sha256") or (_command_digest(command) if command else None)},
        "recorded_at": time.time(),
    }


def check(record, key, nvidia_smi, health_timeout):
    """(reasons, checks compared): stops at the first kind of thing that differs."""
    steps = [
        ("key", lambda: C.key_reasons(record.get("key"), key)),
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
        ("command", lambda: [r for r in [C.command_reason((record.get("command") or {}).get("sha256"),
                                                          _command_digest(record.get("command")),
                                                          "the package lock (uv pip compile)")] if r]
         if (record.get("command") or {}).get("argv") else []),
    ]
    done = 0
    for _name, step in steps:
        reasons = step()
        done += 1
        if reasons:
            return reasons, done
    return [], done


def write_record(path, record):
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, sort_keys=True, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


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
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    start = time.monotonic()
    p = module.params
    path = p["path"]
    nvidia_smi = module.get_bin_path("nvidia-smi") or ""
    result = dict(changed=False, converged=False, reasons=[], release="", instances=[], checks=0, recorded_at=0.0)

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
                write_record(path, record)
            except OSError as exc:
                module.fail_json(msg="could not write the deploy record %s: %s" % (path, exc), **result)
        module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)

    record = _read_record(path)
    reasons = C.record_reasons(record)
    checks = 0
    if not reasons:
        reasons, checks = check(record, p["key"], nvidia_smi, p["health_timeout"])
    if record:
        result.update(release=record.get("release") or "", recorded_at=record.get("recorded_at") or 0.0,
                      instances=[dict((k, i.get(k)) for k in ("name", "port", "served_model_name"))
                                 for i in record.get("instances") or []])
    result.update(converged=not reasons, reasons=reasons, checks=checks)
    module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)


if __name__ == "__main__":
    main()
