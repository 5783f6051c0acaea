#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: layout_info
short_description: Read who controls the host layout root is about to write (symlinks, owners, modes)
version_added: "0.1.0"
description:
  - Before root writes anything, every directory it is about to use must be one that no other user can swap
    or fill. This module reads the directories named by the options with C(lstat) and answers with one line
    per path that someone other than root controls (RV(problems)), the shared directories and releases that
    others may write (RV(loose)), and the directories of O(keep) that are not yet as the role keeps them
    (RV(unkept)).
  - A symlink is followed only when root made it (an operator's C(/opt/dflash -> /data/dflash)). Every
    existing directory above a layout path must be owned by root and not writable by others (a sticky
    directory such as C(/tmp) excepted), and so must every directory on the module's C(PATH) (root's, when
    it runs with become) and every directory above one.
  - Writable by others means writable by everyone, or by the group O(service_group).
  - Never changes anything; C(changed) is always false. Standard library only.
author:
  - dflash.deploy contributors (@dflash)
options:
  service_user:
    description:
      - The service user. An instance directory it owns is accepted, and so is a directory of O(service_parents)
        it owns. A user not made yet owns nothing.
    type: str
    required: true
  service_group:
    description:
      - The service group. A directory this group may write counts as writable by others. A group not made
        yet counts for nothing.
    type: str
    required: true
  root_dirs:
    description:
      - Root's own directories, made and kept root-owned by the role. Each that exists must be a directory
        (or a link root made to one) owned by root; one owned by someone else is a problem. A loosened mode
        is not a problem here (O(keep) puts it back).
    type: list
    elements: path
    default: []
  service_parents:
    description:
      - Root's own directories that versions before this one left to the service user (C(/var/lib/dflash),
        C(/var/cache/dflash)). As O(root_dirs), except that the service user as owner is accepted (the role
        makes them root's again once the instance directories in them are checked).
    type: list
    elements: path
    default: []
  shared_dirs:
    description:
      - Root's own directories other roles make (C(releases), C(artifacts), C(tools)). As O(root_dirs); one
        that others may write is listed in RV(loose).
    type: list
    elements: path
    default: []
  release_dirs:
    description:
      - Directories whose entries are releases. Each entry must be a real directory owned by root (a link, or
        one owned by someone else, is a problem; a stray file is left alone); one that others may write is
        listed in RV(loose).
      - Everything inside each release must be root's and not writable by others too (root runs the release's
        interpreter, and uv queries it); the first entry that is not is named, and the release is a problem to
        remove (a deploy builds it again), not a mode to put back.
    type: list
    elements: path
    default: []
  service_dirs:
    description:
      - The service user's instance directories. Each that exists must be a real directory (never a link)
        owned by the service user or root.
    type: list
    elements: path
    default: []
  staged_dirs:
    description:
      - Model directories root writes from the controller, wherever the operator put them. Checked as
        O(root_dirs), with every directory above them.
    type: list
    elements: path
    default: []
  parents_of:
    description:
      - Paths below which root writes (the unit directory, the layout's base). Every existing directory above
        each must be owned by root and not writable by others; the path itself is not checked. With nothing
        else named, the module reads root's C(PATH) and these alone, which is cheap enough to run first, before
        any command runs by name.
    type: list
    elements: path
    default: []
  keep:
    description:
      - Root's directories as the role keeps them. Each whose path is not a directory (followed as the file
        module follows it) owned by root with this group and exactly this mode is listed in RV(unkept), and
        so is one whose group does not exist yet.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      group:
        description: Its group.
        type: str
        required: true
      mode:
        description:
          - Its mode, as the file module takes a number - an octal string such as V('0755'), or an integer.
        type: raw
        required: true
notes:
  - Supports check mode; it reads the same in check mode as on a real run.
seealso:
  - module: dflash.deploy.release_fingerprint
"""

EXAMPLES = r"""
- name: Read who controls the host layout
  dflash.deploy.layout_info:
    service_user: sglang
    service_group: sglang
    root_dirs: [/opt/dflash, /opt/dflash/bin, /opt/dflash/instances]
    service_parents: [/var/lib/dflash, /var/cache/dflash]
    shared_dirs: [/opt/dflash/releases, /opt/dflash/artifacts, /opt/dflash/tools]
    release_dirs: [/opt/dflash/releases]
    service_dirs: [/var/lib/dflash/qwen3-8b, /var/cache/dflash/qwen3-8b]
    keep:
      - {path: /opt/dflash, group: root, mode: "0755"}
      - {path: /etc/dflash, group: sglang, mode: "0750"}
  register: layout

- name: Refuse a layout path that someone other than root controls
  ansible.builtin.assert:
    that: layout.problems | length == 0
    fail_msg: "{{ layout.problems | join('; ') }}"
"""

RETURN = r"""
problems:
  description: One line per path that someone other than root controls, naming it and what to do; empty when none.
  returned: always
  type: list
  elements: str
  sample:
    - "host layout: /var/lib/dflash/qwen3-8b is a symlink (-> /etc) made by sglang: root would follow it and hand
      its target to the service user; remove it and check what it points at"
loose:
  description: The existing O(shared_dirs) and releases in O(release_dirs) that others may write, in the order read.
  returned: always
  type: list
  elements: str
  sample: ["/opt/dflash/releases", "/opt/dflash/releases/fc72249c303485d4"]
unkept:
  description: The paths of O(keep) that are not yet a directory owned by root with that group and mode, in order.
  returned: always
  type: list
  elements: str
  sample: ["/opt/dflash/cache"]
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.host import layout as L
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()

_PATHS = ("root_dirs", "service_parents", "shared_dirs", "release_dirs", "service_dirs", "staged_dirs", "parents_of")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            service_user=dict(type="str", required=True),
            service_group=dict(type="str", required=True),
            root_dirs=dict(type="list", elements="path", default=[]),
            service_parents=dict(type="list", elements="path", default=[]),
            shared_dirs=dict(type="list", elements="path", default=[]),
            release_dirs=dict(type="list", elements="path", default=[]),
            service_dirs=dict(type="list", elements="path", default=[]),
            staged_dirs=dict(type="list", elements="path", default=[]),
            parents_of=dict(type="list", elements="path", default=[]),
            keep=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                group=dict(type="str", required=True),
                mode=dict(type="raw", required=True),
            )),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    params = module.params
    keep = []
    for want in params["keep"]:
        try:
            keep.append(L.Keep(path=want["path"], group=want["group"], mode=L.parse_mode(want["mode"])))
        except ValueError as exc:
            module.fail_json(msg="keep %s: %s" % (want["path"], exc), changed=False)
    reading = L.read_layout(service_user=params["service_user"], service_group=params["service_group"],
                            keep=keep, path_env=os.environ.get("PATH", ""),
                            **dict((name, params[name]) for name in _PATHS))
    module.exit_json(changed=False, **reading.as_dict())


if __name__ == "__main__":
    main()
