#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: release_bytecode
short_description: Compile a release's bytecode as root with its base interpreter, never the release's own
version_added: "0.1.0"
description:
  - Compiles every C(.py) file of the release's site-packages into C(__pycache__), so that the service user,
    who cannot write the root-owned release, does not compile every source again in every interpreter.
  - Root never runs the release's C(bin/python), whose C(site) module would run the release's C(.pth) files as
    root. The module runs the release's base interpreter instead, the real file C(bin/python) resolves to,
    as C(<base> -I -S -m compileall -q -j <jobs> <site-packages>) from C(/) with a small environment and
    umask 022. C(-I -S) loads no user site, no C(site) module and no C(.pth) file; compileall compiles and
    never executes what it compiles.
  - Refused, in one line and before anything runs, when C(bin/python) is missing or resolves inside the
    release, or the base interpreter is not an executable regular file owned by root and writable by no one
    else, in directories root alone can change. Refused when the base interpreter (asked with C(-I -S)) is
    another Python major.minor than C(pyvenv.cfg) names (C(version_info), else C(version)); bytecode is
    specific to major.minor.
  - A file compileall cannot compile is not a failure; RV(error_count) and RV(errors) name them. The module
    fails when compileall does not start, times out, or exits non-zero naming no file.
  - An up-to-date C(.pyc) is left alone, so a second run writes nothing and the release's fingerprint
    (M(dflash.deploy.release_fingerprint)) stays as the first run left it.
  - Check mode runs nothing. C(changed) is then an estimate from one walk of the site-packages
    directory, true when a C(.py) file has no C(__pycache__/<name>.cpython-XY.pyc) for the version
    C(pyvenv.cfg) names; a stale C(.pyc) counts as present. The interpreter checks that need no run are
    made in check mode too.
author:
  - dflash.deploy contributors (@dflash)
options:
  path:
    description:
      - The release directory, a virtual environment (C(pyvenv.cfg), C(bin/python),
        C(lib/pythonX.Y/site-packages)). A link is refused.
    type: path
    required: true
  jobs:
    description:
      - Worker processes compileall uses (its C(-j)); C(0) is one per CPU.
    type: int
    default: 0
  timeout:
    description:
      - Seconds compileall may take; on timeout its whole process group is killed and the module fails.
    type: int
    default: 1800
notes:
  - The C(.pyc) files are timestamp-checked (they record the source's size and modification time); a source
    changed later is compiled again in memory by the interpreter that imports it, never trusted stale.
  - The files are root's, mode C(0644) or the source's, in C(0755) C(__pycache__) directories, as the host
    layout read (M(dflash.deploy.layout_info)) wants every file of a release.
seealso:
  - module: dflash.deploy.release_fingerprint
  - module: dflash.deploy.pkg_probe
"""

EXAMPLES = r"""
- name: Compile the release's bytecode before it is fingerprinted and verified
  dflash.deploy.release_bytecode:
    path: /opt/dflash/releases/{{ release_id }}
    jobs: 0
  register: bytecode

- name: Name the files Python could not compile
  ansible.builtin.debug:
    msg: "{{ bytecode.error_count }} files not compiled, e.g. {{ bytecode.errors | join(', ') }}"
  when: bytecode.error_count > 0
"""

RETURN = r"""
changed:
  description: True when C(.pyc) files were written (added, rewritten or removed); in check mode, the estimate.
  returned: always
  type: bool
interpreter:
  description: The base interpreter that compiled (or, in check mode, would compile) the bytecode.
  returned: success
  type: str
  sample: /usr/bin/python3.12
site_packages:
  description: The directory compiled.
  returned: success
  type: str
  sample: /opt/dflash/releases/fc72249c303485d4/lib/python3.12/site-packages
compiled:
  description: C(.pyc) files added; in check mode, the C(.py) files that have none (the estimate).
  returned: success
  type: int
  sample: 25876
rewritten:
  description: Existing C(.pyc) files compileall wrote again (their source had changed).
  returned: success and not check mode
  type: int
  sample: 0
pyc_before:
  description: C(.pyc) files in C(__pycache__) directories before the run; null in check mode.
  returned: success
  type: int
  sample: 0
pyc_after:
  description: C(.pyc) files in C(__pycache__) directories after the run; null in check mode.
  returned: success
  type: int
  sample: 25876
cache_tag:
  description: The base interpreter's C(sys.implementation.cache_tag), the C(.pyc) names' middle part.
  returned: success and not check mode
  type: str
  sample: cpython-312
error_count:
  description: Files compileall could not compile (not a failure).
  returned: success
  type: int
  sample: 2
errors:
  description: The first ten of those files.
  returned: success
  type: list
  elements: str
  sample: ["/opt/dflash/releases/fc72249c303485d4/lib/python3.12/site-packages/pkg/template.py"]
seconds:
  description: Seconds the version check and compileall took; 0 in check mode.
  returned: success
  type: float
  sample: 92.4
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.release import bytecode as BC
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            jobs=dict(type="int", default=0),
            timeout=dict(type="int", default=1800),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    if module.params["jobs"] < 0 or module.params["timeout"] < 1:
        module.fail_json(msg="jobs must be 0 or more and timeout 1 or more (got %d and %d)"
                         % (module.params["jobs"], module.params["timeout"]), changed=False)
    try:
        result = BC.compile_release(module.params["path"], jobs=module.params["jobs"],
                                    timeout=module.params["timeout"], check_mode=module.check_mode)
    except BC.BytecodeError as exc:
        module.fail_json(msg=str(exc), changed=exc.changed)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
