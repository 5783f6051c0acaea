#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: uv_command
short_description: Run uv with an environment that may carry index or proxy credentials, never on a command line
version_added: "0.1.0"
description:
  - Runs O(argv) (uv, or C(/bin/bash -c) around it) with O(env) added to the module's environment, O(stdin) fed
    through a pipe, as M(ansible.builtin.command) would, and returns the same C(rc), C(stdout) and C(stderr).
  - O(env) is where an index URL (C(UV_DEFAULT_INDEX), C(UV_INDEX)) and a proxy (C(https_proxy), ...) reach uv.
    An index URL on uv's command line (C(--index-url https://user:token@host/simple)) was readable by every local
    user in C(/proc/<pid>/cmdline), printed at C(-v) and logged to the journal with the module's arguments; a
    task's C(environment:) keyword is no better (Ansible writes it onto the remote shell's command line).
    A module option travels in the module's payload.
  - The module logs none of its arguments to the journal, and every credential of a URL in O(env) (its
    C(user:password), and the password alone) is masked in all the module returns (C(stdout), C(stderr), C(msg),
    the invocation shown at C(-vvv)). A message naming a URL writes its credentials C(***).
  - A non-zero exit fails the task with the last line uv wrote to stderr; the task's C(failed_when) may decide
    otherwise.
author:
  - dflash.deploy contributors (@dflash)
options:
  argv:
    description: The program (an absolute path) and its arguments.
    type: list
    elements: str
    required: true
  stdin:
    description: Text fed to the program's standard input (nothing when not given).
    type: str
  env:
    description:
      - Variables added to the environment the program runs with (uv's C(UV_*), proxy variables). Values are
        turned into strings.
    type: dict
    default: {}
notes:
  - Check mode runs nothing and reports C(skipped); a task that only reads (C(uv pip compile), C(uv pip freeze)),
    or passes uv's C(--dry-run) in check mode, turns check mode off for itself (the task keyword C(check_mode)
    set to false), as it would with M(ansible.builtin.command).
  - No diff.
seealso:
  - module: ansible.builtin.command
"""

EXAMPLES = r"""
- name: Lock against an index whose URL carries a token
  dflash.deploy.uv_command:
    argv: [/opt/dflash/tools/uv, pip, compile, --quiet, --generate-hashes, -]
    stdin: sglang==0.5.11
    env:
      UV_CACHE_DIR: /opt/dflash/cache/uv
      UV_NO_CONFIG: "1"
      UV_DEFAULT_INDEX: https://deploy:s3cret-token@packages.example.com/simple
      https_proxy: http://proxy.example.com:3128
  register: lock
  changed_when: false
  check_mode: false
"""

RETURN = r"""
cmd:
  description: O(argv) as run (it carries no index and no proxy).
  returned: always
  type: list
  elements: str
rc:
  description: The exit code (null when the program could not be started).
  returned: when run
  type: int
stdout:
  description: What the program printed on standard output, credentials masked.
  returned: when run
  type: str
stderr:
  description: What the program printed on standard error, credentials masked.
  returned: when run
  type: str
stdout_lines:
  description: RV(stdout) split into lines.
  returned: when run
  type: list
  elements: str
stderr_lines:
  description: RV(stderr) split into lines.
  returned: when run
  type: list
  elements: str
start:
  description: When the program started, on the host's clock, as the command module writes it.
  returned: when run
  type: str
  sample: "2026-12-07 08:40:01.123456"
end:
  description: When the program ended, in the same form.
  returned: when run
  type: str
  sample: "2026-12-07 08:40:09.654321"
delta:
  description: How long it ran, in the same form as the command module's.
  returned: when run
  type: str
  sample: "0:00:08.530865"
"""

import datetime
import os
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils import uv_env as U
except ImportError:
    U = None
    IMPORT_ERROR = traceback.format_exc()
else:
    IMPORT_ERROR = None


def failure(argv, rc, stderr):
    """One line for a failed run: the program, its exit code, the last line it wrote to stderr."""
    last = [line.strip() for line in stderr.splitlines() if line.strip()]
    return U.redact_urls("%s exited %s%s" % (os.path.basename(argv[0]), "(not started)" if rc is None else rc,
                                             ": " + last[-1] if last else ""))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            argv=dict(type="list", elements="str", required=True),
            stdin=dict(type="str"),
            env=dict(type="dict", default={}, no_log=False),
        ),
        supports_check_mode=True,
        no_log=True,  # never log the arguments (env) to the journal; the result is masked below
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    env = dict((str(k), "" if v is None else str(v)) for k, v in (p["env"] or {}).items())
    module.no_log_values.update(U.secrets(env))
    argv = p["argv"]
    if not argv:
        module.fail_json(msg="argv is empty: name the program to run", cmd=[])
    result = dict(changed=True, cmd=argv)
    if module.check_mode:
        module.exit_json(skipped=True, msg="not run in check mode", **result)
    start = datetime.datetime.now()
    rc, out, err = U.run_uv(argv, p["stdin"], env)
    end = datetime.datetime.now()
    result.update(start=str(start), end=str(end), delta=str(end - start))
    result.update(rc=rc, stdout=out.rstrip("\r\n"), stderr=err.rstrip("\r\n"),
                  stdout_lines=out.rstrip("\r\n").splitlines(), stderr_lines=err.rstrip("\r\n").splitlines())
    if rc != 0:
        module.fail_json(msg=failure(argv, rc, err), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
