# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller side of dflash.deploy.bundle_push (documented in plugins/modules/bundle_push.py).

Round trips: the module once to read the manifest digest of what dest holds (and stop there when it
is the bundle's, or in check mode), the remote tmp dir, the connection's put_file of the bundle, the
module once more to check the received file's size and manifest digest and rename it into place, the
tmp dir's removal. No whole-file checksum on either side.
"""

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

MODULE = "dflash.deploy.bundle_push"

ARGUMENT_SPEC = dict(
    src=dict(type="path", required=True),
    dest=dict(type="path", required=True),
    manifest_sha256=dict(type="str", required=True),
    owner=dict(type="str"),
    group=dict(type="str"),
    mode=dict(type="raw", default="0644"),
    size=dict(type="int"),
)


class ActionModule(ActionBase):

    TRANSFERS_FILES = True
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = False
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect

        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        try:
            src = self._find_needle("files", args["src"])
        except AnsibleError as exc:
            raise AnsibleActionFail("bundle_push: src %s: %s" % (args["src"], exc.message)) from exc
        try:
            size = os.stat(src).st_size
        except OSError as exc:
            raise AnsibleActionFail("bundle_push: src %s: %s" % (src, exc.strerror or exc)) from exc
        if not os.path.isfile(src):
            raise AnsibleActionFail("bundle_push: src %s is not a regular file" % src)

        module_args = dict((k, v) for k, v in args.items() if k != "size" and v is not None)
        module_args["src"] = src

        # First call: what dest holds. The same digest (or check mode) ends the task with no transfer.
        first = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
        if first.get("failed") or not first.get("changed") or first.get("manifest_sha256") == \
                first.get("before_manifest_sha256") or self._task.check_mode:
            result.update(first)
            return result

        made_tmp = self._connection._shell.tmpdir is None
        if made_tmp:
            self._make_tmp_path()
        tmpdir = self._connection._shell.tmpdir
        try:
            remote = self._connection._shell.join_path(tmpdir, "bundle.part")
            self._transfer_file(src, remote)
            # A become user other than the connection's gets read access to the received file (ACL,
            # chown, ... as Ansible's own modules do); the file need not be executable.
            self._fixup_perms2((tmpdir, remote), execute=False)
            module_args.update(src=remote, size=size)
            second = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
        finally:
            if made_tmp:
                self._remove_tmp_path(tmpdir)
        result.update(second)
        result["transferred"] = True
        result["before_manifest_sha256"] = first.get("before_manifest_sha256")
        return result
