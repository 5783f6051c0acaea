#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: dflash_tree_info
short_description: Read what a DFlash-capable sglang tree declares (its version and requirements)
version_added: "0.1.0"
description:
  - Reads the version and the requirements of the sglang package tree at C(<source_dir>/<package_subdir>),
    from the tree itself. Run it where the tree is (the role runs it on the controller).
  - The version is a top-level literal in the tree's C(sglang/_version.py) (what a built sglang writes, 0.5.11
    on; its C(version.py) imports it and only holds a fallback), else in C(sglang/version.py), else the declared
    version.
  - The requirements come from the declaration beside the package (the package directory's parent) -
    C(pyproject.toml)'s C([project]) dependencies (a checkout, or what M(dflash.deploy.dflash_tree_capture)
    writes), else a C(METADATA) file's C(Requires-Dist), read as the email headers it is.
  - A tree that declares nothing fails, naming both files it looked for. No list is kept by hand.
  - Never changes anything; C(changed) is always false.
author:
  - dflash.deploy contributors (@dflash)
options:
  source_dir:
    description:
      - The tree's directory (a checkout, or what C(playbooks/stage_artifacts.yml) captured).
    type: path
    required: true
  package_subdir:
    description:
      - The sglang package inside O(source_dir); its parent holds the declaration.
    type: str
    default: python/sglang
requirements:
  - Python 3.11 or newer where it runs (C(tomllib) reads C(pyproject.toml)); the controller's Python is.
attributes:
  check_mode:
    support: full
    description: Reads only; the result is the same with and without check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to show.
  platform:
    support: full
    platforms: posix
    description: Wherever the tree is; the role delegates it to the controller.
seealso:
  - module: dflash.deploy.dflash_tree_capture
  - module: dflash.deploy.dflash_tree_overlay
"""

EXAMPLES = r"""
- name: Read what the tree declares (on the controller, with its Python)
  dflash.deploy.dflash_tree_info:
    source_dir: /srv/dflash/artifacts/dflash-src
    package_subdir: python/sglang
  delegate_to: localhost
  become: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  register: tree

- name: Show the tree's version and requirements
  ansible.builtin.debug:
    msg: "sglang {{ tree.version }} declared in {{ tree.declared_in }}: {{ tree.requires | join(', ') }}"
"""

RETURN = r"""
version:
  description: The tree's version (its C(_version.py) or C(version.py)), else the declared version.
  returned: success
  type: str
  sample: "0.5.11"
declared_version:
  description: The version the declaration states; null when it states none.
  returned: success
  type: str
  sample: "0.5.11"
requires:
  description: The requirements the tree declares, as written there.
  returned: success
  type: list
  elements: str
  sample: ["sglang-kernel==0.4.2", "flashinfer-python==0.6.8.post1", "transformers==5.6.0"]
declared_in:
  description: The file the requirements were read from.
  returned: success
  type: str
  sample: /srv/dflash/artifacts/dflash-src/python/pyproject.toml
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree.info import TreeInfoError, tree_info
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source_dir=dict(type="path", required=True),
            package_subdir=dict(type="str", default="python/sglang"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    try:
        info = tree_info(module.params["source_dir"], module.params["package_subdir"])
    except TreeInfoError as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(changed=False, version=info.version, declared_version=info.declared_version,
                     requires=list(info.requires), declared_in=info.declared_in)


if __name__ == "__main__":
    main()
