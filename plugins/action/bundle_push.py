# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller side of dflash.deploy.bundle_push (documented in plugins/modules/bundle_push.py).

Round trips: the module once to read the manifest digest of what dest holds (and stop there when it
is the bundle's, or in check mode), the remote tmp dir, the bundle's transfer, the module once more
to check the received file's size and manifest digest and rename it into place, the tmp dir's
removal. No whole-file checksum on either side.

The transfer, on an ssh connection with key authentication (``transfer: auto``), is one ``ssh
<host> 'cat > <tmp>/bundle.part'`` of the connection's own command line (its options, its
multiplexed master), with the bundle file itself as ssh's standard input: the bytes stream from
the controller's disk at ``cat``'s pace. On a local connection (as root, or without become) there is
no transfer and no tmp dir: the second module run copies the controller's file beside dest itself
(``keep_src``), one copy of the bytes. Anywhere else, or with ``transfer: put_file``, it is the
connection's ``put_file`` (sftp or scp over ssh).
"""

import os
import subprocess
import tempfile

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
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
    transfer=dict(type="str", default="auto", choices=["auto", "put_file"]),
)


def stream_argv(connection, remote_path, transfer="auto"):
    """The ssh command line that writes stdin to ``remote_path`` on the host, or None to use put_file.

    Only for the ssh connection (``transport == 'ssh'``) without a password: with one, the command
    line would hand the password to ``sshpass`` through a pipe that only the connection's own runner
    feeds. The line is the connection's ``_build_command`` for the ``ssh`` subsystem, so it carries
    the same options (``ssh_args``, ``ssh_common_args``, ``ssh_extra_args``, port, user, key, the
    ControlPath of its master) as every module run of the task.
    """
    if transfer != "auto" or getattr(connection, "transport", None) != "ssh":
        return None
    if not hasattr(connection, "_build_command") or getattr(connection._shell, "_IS_WINDOWS", False):
        return None
    if connection.get_option("password") or connection._play_context.password:
        return None
    host = connection.get_option("host") or connection._play_context.remote_addr
    connection.host = host
    command = "cat > %s" % connection._shell.quote(remote_path)
    return connection._build_command(connection.get_option("ssh_executable"), "ssh", host, command)


def local_copy(connection, play_context, transfer="auto"):
    """Whether the module may copy the controller's file into place itself: a ``local`` connection, ``transfer``
    ``auto``, and the module running as root or as the controller's own user (no become to another user, who
    might not read the controller's file; there the connection's put_file and Ansible's permission fix-up
    apply)."""
    if transfer != "auto" or getattr(connection, "transport", None) != "local":
        return False
    return not play_context.become or (play_context.become_user or "root") == "root"


def stream_file(argv, src):
    """Run ``argv`` with the file ``src`` as its standard input; raise AnsibleActionFail when it fails.

    stdin is the open file itself, so ssh reads the bundle from disk as it sends it: nothing of it
    is held in the controller's memory. stderr goes to a temporary file, not a pipe, and the call
    waits for the process, not for the end of its output: an ssh that starts a ControlPersist master
    leaves that master holding its stderr.
    """
    with open(src, "rb") as source, tempfile.TemporaryFile() as err:
        try:
            rc = subprocess.call(argv, stdin=source, stdout=subprocess.DEVNULL, stderr=err)
        except OSError as exc:
            raise AnsibleActionFail("bundle_push: could not start %s: %s" % (to_text(argv[0]), exc)) from exc
        if rc != 0:
            err.seek(0)
            tail = to_text(err.read()[-2000:], errors="surrogate_or_replace").strip()
            raise AnsibleActionFail("bundle_push: streaming %s to the host failed (ssh exit %d): %s"
                                    % (src, rc, tail or "no message"))


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

        module_args = dict((k, v) for k, v in args.items() if k not in ("size", "transfer") and v is not None)
        module_args["src"] = src

        # First call: what dest holds. The same digest (or check mode) ends the task with no transfer.
        first = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
        if first.get("failed") or not first.get("changed") or first.get("manifest_sha256") == \
                first.get("before_manifest_sha256") or self._task.check_mode:
            result.update(first)
            return result

        if local_copy(self._connection, self._play_context, args["transfer"]):
            module_args.update(size=size, keep_src=True)
            second = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
            result.update(second)
            result.update(transferred=True, transfer="local_copy",
                          before_manifest_sha256=first.get("before_manifest_sha256"))
            return result

        made_tmp = self._connection._shell.tmpdir is None
        if made_tmp:
            self._make_tmp_path()
        tmpdir = self._connection._shell.tmpdir
        try:
            remote = self._connection._shell.join_path(tmpdir, "bundle.part")
            argv = stream_argv(self._connection, remote, args["transfer"])
            if argv is None:
                self._transfer_file(src, remote)
                way = "put_file"
            else:
                stream_file(argv, src)
                way = "ssh_stream"
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
        result["transfer"] = way
        result["before_manifest_sha256"] = first.get("before_manifest_sha256")
        return result
