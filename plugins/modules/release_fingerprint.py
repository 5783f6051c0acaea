#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: release_fingerprint
short_description: Fingerprint a release directory and say whether its verification marker still vouches for it
version_added: "0.1.0"
description:
  - Walks the release directory with C(lstat), never following a link, and digests what the filesystem
    records about every entry (relative path, type, permission bits, owner, group, size, modification time in
    nanoseconds, a link's target). Any write through the filesystem changes the fingerprint. Change time and
    inode number are left out, because uv hard-links its cache into releases and a later build changes the
    link count of files it shares. The top-level C(.dflash-release) directory, which holds the marker, is left
    out.
  - Reads the marker C(.dflash-release/verified.json) and says whether it vouches for the release as it is
    now. It must name this release, carry this fingerprint and, when O(inputs_sha256) is given, the same
    verification inputs.
  - Never changes anything; C(changed) is always false. Standard library only.
author:
  - dflash.deploy contributors (@dflash)
options:
  path:
    description:
      - The release directory. A link, or anything but a directory, is reported in RV(marker_errors), not
        followed or read.
    type: path
    required: true
  inputs_sha256:
    description:
      - Digest of what verification was asked to check (GPUs, driver, imports, requirements). When given, the
        marker must record the same C(inputs) to vouch for the release.
    type: str
notes:
  - A write by root that keeps a file's size and puts its old modification time back is not seen; the audit
    playbook compares file hashes for that.
seealso:
  - module: dflash.deploy.pkg_probe
"""

EXAMPLES = r"""
- name: Read the release's fingerprint and whether it is still verified
  dflash.deploy.release_fingerprint:
    path: /opt/dflash/releases/{{ release_id }}
    inputs_sha256: "{{ verification_inputs | to_json(sort_keys=true) | hash('sha256') }}"
  register: release

- name: Verify it again only when something changed
  ansible.builtin.debug:
    msg: "verify again: {{ release.marker_errors | join('; ') }}"
  when: not release.vouched
"""

RETURN = r"""
fingerprint:
  description: The tree's digest, its regular files and their bytes; null when O(path) is not a real directory.
  returned: always
  type: dict
  sample: {"sha256": "4c1f0d...", "files": 12591, "bytes": 4712345678}
marker:
  description: The parsed C(verified.json), or null when there is none or it does not parse.
  returned: always
  type: dict
  sample: {"release_id": "fc72249c303485d4", "fingerprint": "4c1f0d...", "inputs": "9a0b..."}
marker_errors:
  description: Why the marker does not vouch for the release as it is now, one line each; empty when it does.
  returned: always
  type: list
  elements: str
  sample: ["its files changed since it was verified (fingerprint 4c1f0d2e9a11, verified 77ab10c3d2f0)"]
vouched:
  description: True when RV(marker_errors) is empty.
  returned: always
  type: bool
files_changed:
  description:
    - True when the files changed since the marker was written (no marker of this release, or another
      fingerprint). A server running this release then runs bytes that were never verified, and should restart.
    - False for a marker of an older deploy that recorded no fingerprint, and when only the inputs differ.
  returned: always
  type: bool
elapsed:
  description: Seconds the walk took.
  returned: always
  type: float
  sample: 0.08
"""

import os
import stat
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils import fingerprint as FP
    from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def _read_marker(path):
    """(marker or None, why not) for the marker file at ``path``, read without following a link."""
    try:
        data = read_regular(path, FP.MAX_MARKER_BYTES, nofollow=True)
    except OSError as exc:
        return None, "no readable verified.json (%s)" % (exc.strerror or exc)
    return FP.parse_marker(data)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            inputs_sha256=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    path = module.params["path"].rstrip("/") or "/"
    start = time.monotonic()
    result = dict(changed=False, fingerprint=None, marker=None, marker_errors=[], vouched=False, files_changed=True)
    try:
        st = os.lstat(path)
    except OSError as exc:
        result["marker_errors"] = ["%s cannot be read (%s)" % (path, exc.strerror or exc)]
        module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)
    if not stat.S_ISDIR(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        result["marker_errors"] = ["%s is %s, not a release directory" % (path, what)]
        module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)
    try:
        fp = FP.fingerprint(path)
    except OSError as exc:
        module.fail_json(msg="release_fingerprint could not read %s: %s" % (path, exc), changed=False)
    marker, why = _read_marker(os.path.join(path, FP.MARKER_DIR, "verified.json"))
    errors = FP.marker_errors(marker, os.path.basename(path), fp.sha256, module.params["inputs_sha256"])
    if marker is None and why:
        errors = ["it was never verified: " + why]
    result.update(fingerprint=dict(sha256=fp.sha256, files=fp.files, bytes=fp.bytes), marker=marker,
                  marker_errors=errors, vouched=not errors,
                  files_changed=FP.files_changed(marker, os.path.basename(path), fp.sha256))
    module.exit_json(elapsed=round(time.monotonic() - start, 3), **result)


if __name__ == "__main__":
    main()
