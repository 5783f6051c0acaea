#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: dflash_tree_capture
short_description: Capture the DFlash-capable sglang tree of a working venv as one reproducible tar
version_added: "0.1.0"
description:
  - Writes O(dest), a tar of the venv's WHOLE installed C(sglang/) package (a DFlash-capable sglang is a whole
    tree, not the files that differ from PyPI's), without bytecode, and a C(pyproject.toml) declaring what the
    tree needs. M(dflash.deploy.dflash_tree_info) reads that declaration.
  - The declared version is the tree's own - a top-level literal in C(sglang/_version.py) (what a built sglang
    writes, 0.5.11 on), else in C(sglang/version.py). A tree with neither fails.
  - The declared requirements are the venv's sglang C(METADATA) C(Requires-Dist) when that dist-info describes
    this tree (same version), else the kernel stack the tree runs with in the venv (sglang-kernel, sgl-kernel,
    flashinfer-python, flashinfer-cubin, torch, transformers at their installed versions, local tags dropped) -
    a tree copied over another release leaves a dist-info that no longer describes the code.
  - The tar is reproducible (sorted members, mode 0644, mtime 0, owner 0, GNU format). It is written under a
    temporary name beside O(dest) and renamed over it, only when its bytes differ from what O(dest) holds;
    C(changed) says so.
  - Uses only the Python standard library on the managed host.
author:
  - dflash.deploy contributors (@dflash)
options:
  venv:
    description:
      - The venv holding the tree, C(<venv>/lib/python3.X/site-packages/sglang).
    type: path
    required: true
  dest:
    description:
      - The tar to write. Its directory must exist.
    type: path
    required: true
requirements:
  - Python 3.8 to 3.13 on the managed host (the versions the collection's sanity tests compile and import on).
attributes:
  check_mode:
    support: full
    description: Builds the tar in memory and compares it with O(dest); writes nothing.
  diff_mode:
    support: full
    description: Shows the tar's members that would be added, replaced or removed.
  platform:
    support: full
    platforms: posix
    description: The reference host whose venv runs the tree.
seealso:
  - module: dflash.deploy.dflash_tree_info
  - module: dflash.deploy.dflash_tree_overlay
"""

EXAMPLES = r"""
- name: Capture the DFlash-capable sglang tree of the reference venv
  dflash.deploy.dflash_tree_capture:
    venv: /root/venv_sglang211
    dest: /opt/dflash/artifacts/stage/dflash-src.tar
  register: capture

- name: Say what was captured
  ansible.builtin.debug:
    msg: "sglang {{ capture.version }}, {{ capture.files }} files; requirements: {{ capture.requires | join(', ') }}"
"""

RETURN = r"""
dest:
  description: The tar.
  returned: success
  type: str
  sample: /opt/dflash/artifacts/stage/dflash-src.tar
files:
  description: How many files of the tree the tar holds (the C(pyproject.toml) not counted).
  returned: success
  type: int
  sample: 2043
version:
  description: The tree's version, as declared in the tar's C(pyproject.toml).
  returned: success
  type: str
  sample: "0.5.11"
requires:
  description: The requirements declared in the tar's C(pyproject.toml).
  returned: success
  type: list
  elements: str
  sample: ["sglang-kernel==0.4.2", "flashinfer-python==0.6.8.post1", "transformers==5.6.0"]
declared:
  description: Where the requirements come from, in words.
  returned: success
  type: str
  sample: the sglang 0.5.11 METADATA of the reference venv
site_packages:
  description: The venv's site-packages the tree was read from.
  returned: success
  type: str
  sample: /root/venv_sglang211/lib/python3.12/site-packages
sha256:
  description: The tar's sha256 (of what was written, or would be in check mode).
  returned: success
  type: str
  sample: 9a0b3c7e5d41f2a8b6c0e1d2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree.capture import CaptureError, capture
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            dest=dict(type="path", required=True),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    params = module.params
    try:
        result = capture(params["venv"], params["dest"], check_mode=module.check_mode, diff=module._diff)
    except CaptureError as exc:
        module.fail_json(msg=str(exc), changed=False)
    except OSError as exc:
        module.fail_json(msg="%s: %s" % (getattr(exc, "filename", None) or "I/O error", exc.strerror or exc))
    tree = result.tree
    out = dict(changed=result.changed, dest=params["dest"], files=len(tree.files), version=tree.version,
               requires=list(tree.requires), declared=tree.declared, site_packages=tree.site_packages,
               sha256=result.sha256)
    if result.changes:
        out["diff"] = dict(prepared="".join(line + "\n" for line in result.changes))
    module.exit_json(**out)


if __name__ == "__main__":
    main()
