#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: releases_info
short_description: Read what the releases on a host were built from, and which ones the instances run
version_added: "0.1.0"
description:
  - One read instead of a find and a read per release. Lists every
    C(<base_dir>/releases/<id>/.dflash-release/built.json) that is a regular file (a link is not a record) with
    its text, the releases the instances' C(current) links point at with their C(built.json) records, and
    whether O(release_dir) is built.
  - Also lists every release directory with its modification time (RV(releases)), each instance's C(current)
    and C(previous) links with the path they resolve to (RV(instances)), and the releases any link in an
    instance directory resolves to (RV(in_use)); what the prune keeps and the audit probes, in the same read.
  - Files are opened as regular files only; a FIFO or a device in a record's place is no record, never a hang.
  - Never changes anything; C(changed) is always false. Standard library only.
author:
  - dflash.deploy contributors (@dflash)
options:
  base_dir:
    description:
      - Root of the host layout, holding C(releases/) and C(instances/). A missing one holds no releases.
    type: path
    required: true
  release_dir:
    description:
      - The release directory the deploy wants; RV(release_built) says whether its C(.dflash-release/built.json)
        exists. Left out, RV(release_built) is false.
    type: path
notes:
  - Supports check mode; it reads the same in check mode as on a real run.
seealso:
  - module: dflash.deploy.release_fingerprint
"""

EXAMPLES = r"""
- name: Read what the releases on this host were built from, and which ones the instances run
  dflash.deploy.releases_info:
    base_dir: /opt/dflash
    release_dir: /opt/dflash/releases/{{ release_id }}
  register: releases

- name: The locks the releases on this host were built from
  ansible.builtin.set_fact:
    built_locks: "{{ releases.built | dflash.deploy.built_locks }}"

- name: The releases beyond the newest three that no instance link resolves to
  ansible.builtin.set_fact:
    to_prune: "{{ releases.releases | dflash.deploy.releases_to_prune(releases.in_use, 3) }}"
"""

RETURN = r"""
built:
  description:
    - Each C(releases/<id>/.dflash-release/built.json) that is a regular file, sorted by release id.
    - C(text) is the file's UTF-8 text, or null when it cannot be read (it then counts as no record).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/opt/dflash/releases/fc72249c303485d4/.dflash-release/built.json",
            "text": "{\"release_id\": \"fc72249c303485d4\", \"spec\": {\"lock\": \"...\"}}"}]
running:
  description:
    - What each C(instances/<name>/current) link points at, each release once, in the order of the instance names.
      A relative target is taken from the link's directory; a target that does not exist is listed too.
  returned: always
  type: list
  elements: str
  sample: ["/opt/dflash/releases/fc72249c303485d4"]
running_built:
  description: The C(built.json) records of RV(running)'s releases that can be read and are JSON objects.
  returned: always
  type: list
  elements: dict
  sample: [{"release_id": "fc72249c303485d4", "spec": {"lock": "...", "python": "3.11", "inputs": {}}}]
release_built:
  description:
    - True when O(release_dir)'s C(.dflash-release/built.json) exists (a link counts); false without O(release_dir).
  returned: always
  type: bool
  sample: false
releases:
  description:
    - Every real directory in C(<base_dir>/releases) (a link is not a release; a name starting with C(.) is left
      out), sorted by name, with its modification time (lstat), what the prune chooses from.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The release directory.
      type: str
    mtime:
      description: Its modification time, seconds since the epoch.
      type: float
  sample: [{"path": "/opt/dflash/releases/fc72249c303485d4", "mtime": 1764662400.0}]
instances:
  description:
    - Each real directory in C(<base_dir>/instances) (a link in an instance's place is not one), sorted by name,
      with its C(current) and C(previous) links, each null when it is not a symbolic link.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The instance directory's name.
      type: str
    path:
      description: The instance directory.
      type: str
    current:
      description:
        - The C(current) link as C(path) (the link), C(target) (its text, relative or absolute) and C(resolved)
          (its realpath, every link followed, what C(readlink -f) names; it need not exist).
      type: dict
    previous:
      description: The C(previous) link, as C(current).
      type: dict
  sample: [{"name": "qwen3-8b", "path": "/opt/dflash/instances/qwen3-8b",
            "current": {"path": "/opt/dflash/instances/qwen3-8b/current",
                        "target": "/opt/dflash/releases/fc72249c303485d4",
                        "resolved": "/opt/dflash/releases/fc72249c303485d4"},
            "previous": null}]
in_use:
  description:
    - The path every symbolic link directly in an instance directory resolves to (any link, whatever the instance's
      state in the inventory; a relative one from the link's directory), each once, sorted. One that resolves into
      C(<base_dir>/releases) is spelled as RV(releases) spells it, also when O(base_dir) is a symlink.
  returned: always
  type: list
  elements: str
  sample: ["/opt/dflash/releases/0b5d31e2a7c94f18", "/opt/dflash/releases/fc72249c303485d4"]
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.release import records as R
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_dir=dict(type="path", required=True),
            release_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    releases = R.read_releases(module.params["base_dir"], module.params["release_dir"])
    module.exit_json(changed=False, **releases.as_dict())


if __name__ == "__main__":
    main()
