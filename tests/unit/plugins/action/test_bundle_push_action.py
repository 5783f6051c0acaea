"""bundle_push's ssh stream, the two functions of the action plugin: the command line it builds from a real
ansible-core ssh connection (its options, quoting, when it declines), and the streaming itself, with a local
command in place of ssh. The stream over a real sshd is proven in the lab (tests/lab/test_bundle_push_ssh.py)."""
from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader

_spec = importlib.util.spec_from_file_location(
    "dflash_bundle_push_action", Path(__file__).resolve().parents[4] / "plugins" / "action" / "bundle_push.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)


def ssh_connection(**options):
    conn = connection_loader.get("ssh", PlayContext())
    conn.set_options(direct=dict({"host": "ct200", "remote_user": "root", "ssh_args": "-o Compression=no",
                                  "control_path": "/cp/%(directory)s-transfer"}, **options))
    return conn


def test_the_stream_is_the_connections_own_ssh_command_with_cat_into_the_quoted_path():
    argv = [a.decode() for a in mod.stream_argv(ssh_connection(), "/tmp/ansible tmp/bundle.part")]
    assert argv[0] == "ssh"
    assert argv[-2:] == ["ct200", "cat > '/tmp/ansible tmp/bundle.part'"]
    assert argv[argv.index("Compression=no") - 1] == "-o"          # ssh_args, as every module run of the task
    assert "User=\"root\"" in argv or "User=root" in argv
    assert "-tt" not in argv                                         # no tty: the bytes go through untouched


def test_the_stream_reuses_the_connections_control_path():
    """The task's ControlPath (cuda_overlay's own transfer master): the stream shares its SSH handshake."""
    argv = [a.decode() for a in mod.stream_argv(ssh_connection(ssh_args="-o ControlMaster=auto -o ControlPersist=60s"),
                                                "/t/b.part")]
    [path] = [a for a in argv if a.startswith("ControlPath=")]
    assert path.startswith('ControlPath="/cp/') and path.endswith('-transfer"'), path


@pytest.mark.parametrize("why, conn, transfer", [
    ("asked for put_file", ssh_connection, "put_file"),
    ("a password: sshpass needs the connection's own runner", lambda: ssh_connection(password="secret"), "auto"),
    ("a local connection", lambda: connection_loader.get("local", PlayContext()), "auto"),
])
def test_put_file_where_the_stream_does_not_apply(why, conn, transfer):
    assert mod.stream_argv(conn(), "/t/b.part", transfer) is None, why


@pytest.mark.parametrize("become, user, transfer, local", [
    (False, None, "auto", True),          # the controller's own user
    (True, "root", "auto", True),         # root reads the controller's file
    (True, None, "auto", True),           # become without a user is root
    (True, "sglang", "auto", False),      # another user may not read it: put_file and the permission fix-up
    (False, None, "put_file", False),     # asked for
])
def test_a_local_connection_copies_the_controllers_file_in_place_where_it_may(become, user, transfer, local):
    ctx = PlayContext()
    ctx.become, ctx.become_user = become, user
    assert mod.local_copy(connection_loader.get("local", PlayContext()), ctx, transfer) is local
    assert mod.local_copy(ssh_connection(), PlayContext(), "auto") is False


def test_stream_file_sends_the_file_byte_for_byte(tmp_path):
    src = tmp_path / "bundle.tar"
    src.write_bytes(bytes(range(256)) * 40_000)
    out = tmp_path / "received"
    mod.stream_file(["sh", "-c", 'cat > "$0"', str(out)], str(src))
    assert out.read_bytes() == src.read_bytes()


def test_a_failed_stream_is_one_message_with_the_exit_code_and_stderr(tmp_path):
    src = tmp_path / "bundle.tar"
    src.write_bytes(b"x" * 1000)
    with pytest.raises(AnsibleActionFail) as err:
        mod.stream_file(["sh", "-c", "cat > /dev/null; echo 'No space left on device' >&2; exit 1"], str(src))
    assert err.value.message == ("bundle_push: streaming %s to the host failed (ssh exit 1): "
                                 "No space left on device" % src)


def test_a_command_that_cannot_start_is_refused(tmp_path):
    src = tmp_path / "bundle.tar"
    src.write_bytes(b"x")
    with pytest.raises(AnsibleActionFail, match="^bundle_push: could not start /no/such/ssh: "):
        mod.stream_file(["/no/such/ssh"], str(src))


def test_a_process_left_holding_stderr_does_not_hold_the_stream(tmp_path):
    """ssh with ControlPersist forks a master that keeps the stderr it inherited: the stream waits for ssh, not
    for the end of its stderr."""
    src = tmp_path / "bundle.tar"
    src.write_bytes(b"y" * 4096)
    out = tmp_path / "received"
    script = 'cat > "$0"; (sleep 60 >&2 &)'
    done = threading.Event()
    thread = threading.Thread(target=lambda: (mod.stream_file(["sh", "-c", script, str(out)], str(src)), done.set()),
                              daemon=True)
    thread.start()
    thread.join(30)
    assert done.is_set(), "stream_file waited for the background process's stderr"
    assert out.read_bytes() == src.read_bytes()
