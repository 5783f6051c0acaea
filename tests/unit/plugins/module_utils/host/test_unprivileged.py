"""host/unprivileged.py: a release's code runs as an unprivileged user through setpriv, or is refused in one line."""
from __future__ import annotations

import os
import pwd
import shutil
import stat
import sys
import tempfile
from types import SimpleNamespace

import abi_native as N
import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import imports as I
from ansible_collections.dflash.deploy.plugins.module_utils.host import unprivileged as U
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import requirements as R

SGLANG = SimpleNamespace(pw_name="sglang", pw_uid=998, pw_gid=997, pw_dir="/nonexistent")
ROOTISH = SimpleNamespace(pw_name="toor", pw_uid=0, pw_gid=0, pw_dir="/root")


def users(name):
    return {"sglang": SGLANG, "toor": ROOTISH}[name]


def setpriv_stat(uid=0, mode=0o100755):
    return lambda _path: SimpleNamespace(st_uid=uid, st_mode=mode)


def test_argv_runs_through_setpriv_by_absolute_path_with_the_users_ids_and_groups():
    argv = U.as_user("sglang", ["/opt/dflash/releases/r/bin/python", "-c", "x"], getpwnam=users,
                     lstat=setpriv_stat())
    assert argv == ["/usr/bin/setpriv", "--reuid=998", "--regid=997", "--init-groups", "--no-new-privs", "--",
                    "/opt/dflash/releases/r/bin/python", "-c", "x"]


def test_unknown_user_uid_0_and_an_unsafe_setpriv_are_refused_in_one_line():
    with pytest.raises(U.UnprivilegedError, match=r"^run_as: no user 'nosuch' on this host$"):
        U.as_user("nosuch", [], getpwnam=users, lstat=setpriv_stat())
    with pytest.raises(U.UnprivilegedError, match="toor has uid 0"):
        U.as_user("toor", [], getpwnam=users, lstat=setpriv_stat())
    with pytest.raises(U.UnprivilegedError, match=r"owned by uid 998 with mode 0755"):
        U.as_user("sglang", [], getpwnam=users, lstat=setpriv_stat(uid=998))
    with pytest.raises(U.UnprivilegedError, match=r"mode 0775: only root"):
        U.as_user("sglang", [], getpwnam=users, lstat=setpriv_stat(mode=0o100775))
    with pytest.raises(U.UnprivilegedError, match="is not a regular file"):
        U.as_user("sglang", [], getpwnam=users, lstat=setpriv_stat(mode=stat.S_IFLNK | 0o777))
    with pytest.raises(U.UnprivilegedError, match=r"^run_as: /no/setpriv: No such file"):
        U.as_user("sglang", [], setpriv="/no/setpriv", getpwnam=users)


def test_user_env_lays_home_user_and_logname_over_the_base():
    env = U.user_env("sglang", {"HOME": "/root", "USER": "root", "PATH": "/usr/bin"}, getpwnam=users)
    assert env == {"HOME": "/nonexistent", "USER": "sglang", "LOGNAME": "sglang", "PATH": "/usr/bin"}
    # the service's own HOME (the instance's state directory) is laid over the user's
    assert I.service_env({"HOME": "/var/lib/dflash/q"}, base=env)["HOME"] == "/var/lib/dflash/q"


needs_root = pytest.mark.skipif(os.geteuid() != 0 or not os.path.isfile(U.SETPRIV), reason="needs root and setpriv")


@pytest.fixture
def shared_dir():
    """A directory any user can read (tmp_path's parents are root's alone)."""
    path = tempfile.mkdtemp(prefix="dflash-unpriv-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


@needs_root
def test_the_import_runs_as_the_user_and_a_pth_file_runs_without_root(shared_dir):
    if N.python_as_nobody_fails():
        pytest.skip(N.python_as_nobody_fails())
    nobody = pwd.getpwnam("nobody")
    with open(os.path.join(shared_dir, "whoami_probe.py"), "w") as f:
        f.write("import os\nraise ImportError('uid=%d euid=%d home=%s' % (os.getuid(), os.geteuid(), "
                "os.environ['HOME']))\n")
    env = I.service_env({"PYTHONPATH": shared_dir}, base=U.user_env("nobody"))
    res = I.import_many(N.nobody_python(), ["whoami_probe"], env=env, user="nobody")["whoami_probe"]
    assert res["ok"] is False
    assert f"uid={nobody.pw_uid} euid={nobody.pw_uid} home={nobody.pw_dir}" in res["error"], res
    as_root = I.import_one(sys.executable, "whoami_probe", env=I.service_env({"PYTHONPATH": shared_dir}))
    assert "uid=0 euid=0" in as_root["error"]  # the same probe without run_as: the module's user


def test_import_many_refuses_root_before_any_import():
    with pytest.raises(U.UnprivilegedError, match="root has uid 0"):
        I.import_many(sys.executable, ["os"], user="root")


@needs_root
def test_uv_pip_check_runs_as_the_user(shared_dir, monkeypatch):
    seen = {}

    def fake_run(argv, timeout, env=None, merge_stderr=False, cwd=None):
        seen.update(argv=argv, env=env, cwd=cwd)
        return 0, "", "", False
    monkeypatch.setattr(R, "run_with_timeout", fake_run)
    assert R.check_with_uv("/opt/dflash/tools/uv", "/r/bin/python", {}, user="nobody") == ([], None)
    assert seen["argv"][:2] == ["/usr/bin/setpriv", "--reuid=%d" % pwd.getpwnam("nobody").pw_uid]
    assert seen["argv"][-5:] == ["/opt/dflash/tools/uv", "pip", "check", "--python", "/r/bin/python"]
    assert seen["env"]["UV_NO_CACHE"] == "1" and seen["env"]["USER"] == "nobody" and seen["cwd"] == "/"
