#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: site_packages_transplant
short_description: Move whole Python distributions between venvs, crash-safe, at copy speed
version_added: "0.1.0"
description:
  - Moves whole distributions (by their C(RECORD), never by directory globs) from a source venv
    or a staged bundle into a destination venv on the managed host.
  - The destination's old version of each moved distribution leaves completely (its RECORD files
    and dist-info), except files the incoming set provides. A file that another distribution staying
    in the destination also claims is never deleted, and shared namespace directories such as
    C(nvidia/) are never replaced as a whole.
  - Every RECORD path is validated first. Absolute paths and C(..) escapes are refused; scripts that
    RECORD places in the venv's C(bin/) are allowed there only, with their interpreter line rewritten
    to the destination's python and their RECORD hash recomputed; wheel data-scheme files elsewhere
    under the venv root (C(share/), C(include/)) move unchanged. Nothing may leave the venv.
  - Files are written under a temporary name and renamed into place (an existing inode is never
    modified; uv hardlinks venv files from its cache); dist-info directories are written last; a
    journal in C(<dest>/.dflash-transplant) lets the next run finish or roll back an interrupted one
    before it does anything else; replaced and removed files are kept as hardlinks in a backup until
    the run succeeds.
  - A source built for another Python ABI than the destination's (wheel tags in the dist-info
    C(WHEEL) files) is refused, as are bundles whose manifest or checksums do not verify.
  - Nothing outside the destination venv is written or deleted, whatever the trees hold. Every path
    written, deleted or listed must resolve inside the venv (symlinks resolved); a symlinked C(lib/),
    site-packages, C(bin/) or state directory, a symlink in the source, and a journal or plan that is
    not one the module wrote are refused. Files get at most mode C(0755). Only regular files are read.
    A run takes a lock on the destination directory before it reads anything, so two runs into one
    venv never both act. See the threat model in the collection's docs/modules/site_packages_transplant.md.
  - A re-run with nothing to do is a stat-only pass (no hashing, no copying) and reports
    C(changed=false).
  - After a bundle run that succeeded it records the bundle file, the options and the lstat facts of every
    file it placed in C(<dest>/.dflash-release/transplant.json). A re-run from the same bundle with the
    same options answers from that record when every recorded fact still holds (RV(fast_path)); it then
    reads neither the bundle nor any RECORD. Anything that differs takes the full path, which repairs.
  - With O(state=packed) it writes a bundle instead, one uncompressed tar holding the selected
    distributions and a manifest with every file's size and sha256.
  - Uses only the Python standard library on the managed host.
author:
  - dflash.deploy maintainers (@dflash)
options:
  dest:
    description:
      - Destination virtual environment (the directory holding C(pyvenv.cfg)).
      - Required with O(state=present).
    type: path
  src:
    description:
      - Source virtual environment on the same host.
      - Mutually exclusive with O(bundle) when O(state=present); required with O(state=packed).
    type: path
  bundle:
    description:
      - With O(state=present), a bundle on the host to take the distributions from.
      - With O(state=packed), the bundle file to write.
    type: path
  state:
    description:
      - V(present) transplants into O(dest); V(packed) writes O(bundle) from O(src).
    type: str
    choices: [present, packed]
    default: present
  distributions:
    description:
      - Distributions to move, as names or globs matched against normalized names (PEP 503), for
        example V(torch), V(nvidia-*).
      - Every entry must match at least one distribution of the source.
      - Required with O(src); with O(bundle) it defaults to every distribution in the bundle.
    type: list
    elements: str
  remove:
    description:
      - Distributions (names or globs) to take out of the destination even if the source lacks them,
        for example the look-alike V(sgl-kernel) beside V(sglang-kernel).
      - A name that matches nothing installed is not an error.
    type: list
    elements: str
    default: []
  link:
    description:
      - How file data arrives. V(auto) reflinks, else hardlinks, when source and destination share a
        filesystem, and copies otherwise. V(hardlink) and V(reflink) fail when impossible.
      - Bundle members are always copied (C(copy_file_range) from the tar); V(auto) and V(copy) are
        accepted with O(bundle).
      - Hardlinked files share their inode with the source venv; that is safe because neither this
        module nor uv ever writes into an existing file.
    type: str
    choices: [auto, hardlink, reflink, copy]
    default: auto
  keep_backups:
    description:
      - How many backups of successful runs to keep in C(<dest>/.dflash-transplant/backups). The
        backup of the running transplant always exists until it succeeds.
    type: int
    default: 0
  fsync:
    description:
      - Also fsync every written file before it is renamed into place. The journal is always
        fsynced. Off by default; consistency after the process is killed does not need it, only
        durability across power loss does.
    type: bool
    default: false
  workers:
    description:
      - Parallel copy threads. Defaults to twice the CPU count, between 2 and 8.
    type: int
  verify_source:
    description:
      - Hash every source venv file against its RECORD before changing anything (bundles are always
        verified). Costs a full read of the source.
    type: bool
    default: false
requirements:
  - Python 3.8 to 3.13 on the managed host (the versions the collection's sanity tests compile and import on).
notes:
  - The environment variables C(_DFLASH_TRANSPLANT_CRASH_AT), C(_DFLASH_TRANSPLANT_PAUSE_AT) and
    C(_DFLASH_TRANSPLANT_PAUSE_FILE) are fault-injection hooks for the collection's tests; unset they do
    nothing. Never set them on a real deploy.
  - Crash safety covers the process being killed at any moment, not power loss unless O(fsync=true).
    See C(docs/modules/site_packages_transplant.md) in the collection for what is fsynced.
attributes:
  check_mode:
    support: full
    description: Reports the plan (what would move, leave and stay) without touching anything.
  diff_mode:
    support: full
    description: Shows the affected distributions' versions before and after.
  platform:
    support: full
    platforms: posix
    description: Linux hosts (uses copy_file_range, FICLONE and hardlinks where available).
seealso:
  - name: Recording installed projects (RECORD)
    description: The packaging specification the module reads and writes.
    link: https://packaging.python.org/en/latest/specifications/recording-installed-packages/
"""

EXAMPLES = r"""
- name: Bring the CUDA 13 torch stack from the reference venv, removing the cu12 runtime
  dflash.deploy.site_packages_transplant:
    src: /opt/reference/venv
    dest: /opt/dflash/releases/{{ release_id }}
    distributions: [torch, triton, "nvidia-*"]
    remove: ["nvidia-*-cu12"]

- name: Pack those distributions into a bundle on the reference host
  dflash.deploy.site_packages_transplant:
    state: packed
    src: /opt/reference/venv
    bundle: /opt/dflash/artifacts/torch-cu130.tar
    distributions: [torch, triton, "nvidia-*"]

- name: Install from a staged bundle, hardlink-free, keeping the last two backups
  dflash.deploy.site_packages_transplant:
    bundle: /opt/dflash/artifacts/torch-cu130.tar
    dest: /opt/dflash/releases/{{ release_id }}
    link: copy
    keep_backups: 2

- name: Take out the look-alike kernel distribution only
  dflash.deploy.site_packages_transplant:
    dest: /opt/dflash/releases/{{ release_id }}
    remove: [sgl-kernel]
"""

RETURN = r"""
moved:
  description: Distributions written into the destination (C(from) is null when it was absent).
  returned: state=present
  type: list
  elements: dict
  sample: [{"name": "torch", "from": "2.11.0+cu128", "to": "2.11.0+cu130"}]
removed:
  description: Distributions taken out of the destination because O(remove) named them.
  returned: state=present
  type: list
  elements: dict
  sample: [{"name": "sgl-kernel", "version": "0.3.21"}]
unchanged:
  description: Selected distributions that already matched in the destination.
  returned: state=present
  type: list
  elements: dict
kept_shared:
  description: Files of leaving distributions kept because a distribution that stays also claims them.
  returned: state=present
  type: list
  elements: str
  sample: ["sgl_kernel/__init__.py"]
files_copied:
  description: Files whose data was copied.
  returned: always
  type: int
files_linked:
  description: Files placed by hardlink or reflink.
  returned: state=present
  type: int
bytes_copied:
  description: Bytes copied.
  returned: always
  type: int
bytes_linked:
  description: Bytes placed by hardlink or reflink.
  returned: state=present
  type: int
files_removed:
  description: Files deleted from the destination (not counting dist-info directories).
  returned: state=present
  type: int
link_methods:
  description: The placement methods actually used (copy, hardlink, reflink).
  returned: state=present
  type: list
  elements: str
elapsed:
  description: Seconds the module itself spent (not counting Ansible's transfer and start-up).
  returned: always
  type: float
fast_path:
  description:
    - True when a re-run from a bundle was answered from the record of the last successful run (nothing to
      do; only lstats), false when the module planned from the bundle.
  returned: state=present
  type: bool
  sample: true
backup:
  description: Backup directory of this run; it only still exists when RV(backup_kept) is true.
  returned: state=present
  type: str
backup_kept:
  description: Whether the backup was kept (O(keep_backups) > 0).
  returned: state=present
  type: bool
recovered:
  description: An interrupted earlier run that this run finished or rolled back first, else null.
  returned: state=present
  type: dict
  sample: {"run_id": "20250101T000000-abc123", "phase": "writing_files", "action": "rolled_back"}
plan:
  description: Counts of the plan (files to write, delete, keep; bytes to place).
  returned: state=present
  type: dict
warnings_list:
  description: Non-fatal observations (for example a distribution without WHEEL tags).
  returned: always
  type: list
  elements: str
bundle:
  description: Path of the bundle written or checked.
  returned: state=packed
  type: str
size:
  description: Size of the bundle in bytes.
  returned: state=packed
  type: int
distributions:
  description: Distributions in the bundle, as name and version.
  returned: state=packed
  type: list
  elements: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dflash.deploy.plugins.module_utils.site_packages_transplant import (
    TransplantError,
    pack_bundle,
    transplant,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path"),
            src=dict(type="path"),
            bundle=dict(type="path"),
            state=dict(type="str", default="present", choices=["present", "packed"]),
            distributions=dict(type="list", elements="str"),
            remove=dict(type="list", elements="str", default=[]),
            link=dict(type="str", default="auto", choices=["auto", "hardlink", "reflink", "copy"]),
            keep_backups=dict(type="int", default=0),
            fsync=dict(type="bool", default=False),
            workers=dict(type="int"),
            verify_source=dict(type="bool", default=False),
        ),
        required_if=[
            ("state", "present", ["dest"]),
            ("state", "packed", ["src", "bundle", "distributions"]),
        ],
        required_by={"src": ["distributions"]},
        supports_check_mode=True,
    )
    params = module.params
    start = time.monotonic()
    if params["keep_backups"] < 0:
        module.fail_json(msg="keep_backups must be 0 or more")
    if params["workers"] is not None and params["workers"] < 1:
        module.fail_json(msg="workers must be 1 or more")
    try:
        if params["state"] == "packed":
            if params["dest"]:
                module.fail_json(msg="dest is not used with state=packed")
            result = pack_bundle(params["src"], params["bundle"], params["distributions"],
                                 check_mode=module.check_mode, workers=params["workers"])
        else:
            if params["src"] and params["bundle"]:
                module.fail_json(msg="src and bundle are mutually exclusive with state=present")
            if not params["src"] and not params["bundle"] and (params["distributions"] or not params["remove"]):
                module.fail_json(msg="state=present needs src or bundle (or only remove, to take distributions out)")
            if params["src"] and not params["distributions"]:  # required_by lets an empty list through
                module.fail_json(msg="distributions must name at least one distribution with src")
            result = transplant(
                dest=params["dest"], src=params["src"], bundle=params["bundle"],
                distributions=params["distributions"], remove=params["remove"], link=params["link"],
                keep_backups=params["keep_backups"], do_fsync=params["fsync"], workers=params["workers"],
                verify_source=params["verify_source"], check_mode=module.check_mode, diff=module._diff,
            )
    except TransplantError as exc:
        module.fail_json(msg=str(exc), elapsed=round(time.monotonic() - start, 4), **exc.details)
    except OSError as exc:
        module.fail_json(msg="%s: %s" % (getattr(exc, "filename", None) or "I/O error", exc.strerror or exc),
                         elapsed=round(time.monotonic() - start, 4))
    for text in result.get("warnings_list", []):
        module.warn(text)
    result["elapsed"] = round(time.monotonic() - start, 4)
    if result.get("bundle") is None and "bundle" in result:
        result.pop("bundle")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
