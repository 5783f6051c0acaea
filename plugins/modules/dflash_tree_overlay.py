#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: dflash_tree_overlay
short_description: Put a DFlash-capable sglang tree in place of a release's sglang package, as a whole tree
version_added: "0.1.0"
description:
  - Makes C(<site_packages>/sglang) hold exactly the files of the tree in O(tar) (a tar of C(sglang/...)).
    Files that differ are written; files the base release installed that the tree lacks are removed, with
    their bytecode and the directories left empty, so no stale module of an older sglang is left to register
    a model architecture twice.
  - The sglang dist-info's C(RECORD) rows for C(sglang/) are rewritten to the tree's files (sha256, size), and
    the manifest O(manifest) lists the tree's files; both describe what is there afterwards.
  - Reports one line per file that differs in RV(changes) (C(add), C(replace), C(remove), C(drift), C(stale)),
    plus C(record) and C(manifest) when those files are rewritten. C(changed) is true when there is any line.
  - A file put there by an earlier run and edited since is C(drift); a file the tree lacks that came back after
    an earlier run (a hand edit, a file-by-file copy) is C(stale). Both are corrected.
  - A change first removes O(verified_marker), so a release whose files changed is verified again before it
    runs. Every file is written under a temporary name (C(<name>.dflash-new)) and renamed over, never written
    in place (uv hard-links venv files from its cache); RECORD and the manifest are written last. An
    interrupted run is finished by the next one.
  - Every tar member is checked before anything is written; a member outside C(sglang/), or one that is
    neither a file nor a directory (a link, a device), is refused.
  - Uses only the Python standard library on the managed host.
author:
  - dflash.deploy contributors (@dflash)
options:
  tar:
    description:
      - The tree, a tar (compressed or not) on the managed host whose members are C(sglang/...).
    type: path
    required: true
  site_packages:
    description:
      - The release's site-packages directory; it must exist.
    type: path
    required: true
  manifest:
    description:
      - The manifest of the tree's files (C(<sha256>  <path>) lines), written after the files. The previous
        run's manifest tells an edited file (C(drift)) from a file of another version (C(replace)).
    type: path
    required: true
  verified_marker:
    description:
      - The release's verification marker, removed before any change. Left alone when nothing changes.
    type: path
requirements:
  - Python 3.8 to 3.13 on the managed host (the versions the collection's sanity tests compile and import on).
attributes:
  check_mode:
    support: full
    description: Reports the same RV(changes) and C(changed), and writes nothing (the marker stays).
  diff_mode:
    support: full
    description: Shows RV(changes), one line per file.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
seealso:
  - module: dflash.deploy.dflash_tree_capture
  - module: dflash.deploy.dflash_tree_info
"""

EXAMPLES = r"""
- name: Put the staged tree in place of the release's sglang
  dflash.deploy.dflash_tree_overlay:
    tar: /opt/dflash/artifacts/dflash-overlay-4c1f0d2e9a11b7c3.tar
    site_packages: /opt/dflash/releases/fc72249c303485d4/lib/python3.12/site-packages
    manifest: /opt/dflash/releases/fc72249c303485d4/.dflash-release/dflash-overlay.sha256
    verified_marker: /opt/dflash/releases/fc72249c303485d4/.dflash-release/verified.json
  register: overlay

- name: Name the files edited by hand since the tree was put there
  ansible.builtin.debug:
    msg: "{{ overlay.changes | select('match', '^(drift|stale) ') | list }}"
"""

RETURN = r"""
changes:
  description:
    - One line per file that differs, C(<kind> <path relative to site-packages>), files of the tree first (in
      path order), then the files it lacks; then C(record) and C(manifest) when those are rewritten.
    - C(add) the release lacks it; C(replace) the release has another version; C(remove) the base release
      installed it and the tree lacks it; C(drift) put there by an earlier run and edited since; C(stale) a file
      the tree lacks that came back after an earlier run.
    - Empty when the release already holds the tree.
  returned: always
  type: list
  elements: str
  sample: ["replace sglang/srt/layers/sampler.py", "add sglang/srt/speculative/dflash_worker.py",
           "remove sglang/srt/models/mimo_v2_flash.py", "record", "manifest"]
files:
  description: How many files the tree holds.
  returned: always
  type: int
  sample: 2043
record:
  description: The sglang dist-info's RECORD the module keeps in step with the tree; null when the release has none.
  returned: always
  type: str
  sample: /opt/dflash/releases/fc72249c303485d4/lib/python3.12/site-packages/sglang-0.5.9.dist-info/RECORD
marker_removed:
  description: True when the run removed O(verified_marker) (never in check mode).
  returned: always
  type: bool
elapsed:
  description: Seconds the run took.
  returned: always
  type: float
  sample: 0.41
"""

import time
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree.overlay import OverlayError, overlay
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            tar=dict(type="path", required=True),
            site_packages=dict(type="path", required=True),
            manifest=dict(type="path", required=True),
            verified_marker=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    params = module.params
    start = time.monotonic()
    try:
        result = overlay(params["tar"], params["site_packages"], params["manifest"], params["verified_marker"],
                         check_mode=module.check_mode)
    except OverlayError as exc:
        module.fail_json(msg=str(exc), changed=False, elapsed=round(time.monotonic() - start, 3))
    except OSError as exc:
        module.fail_json(msg="%s: %s" % (getattr(exc, "filename", None) or "I/O error", exc.strerror or exc),
                         elapsed=round(time.monotonic() - start, 3))
    out = dict(changed=result.changed, changes=result.changes, files=result.files, record=result.plan.record_path,
               marker_removed=result.marker_removed, elapsed=round(time.monotonic() - start, 3))
    if module._diff and result.changed:
        out["diff"] = dict(prepared="".join(line + "\n" for line in result.changes))
    module.exit_json(**out)


if __name__ == "__main__":
    main()
