"""deploy_state as Ansible runs it on a host: a record of what a deploy left, then a check that says
converged only while every recorded thing is as it was, and names what is not. systemctl and
nvidia-smi are small scripts on PATH that print what the real ones print."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "support"))
from module_runner import INJECT_INVOCATION, run_module  # noqa: E402

KEY = {"collection": "c", "vars": "v", "artifacts": "a"}
SMI_ROWS = "0, GPU-a, 00000000:01:00.0, 580.95.05\n1, GPU-b, 00000000:21:00.0, 580.95.05\n"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture()
def host(tmp_path, monkeypatch):
    """A host: a release tree, config files, a unit systemctl reports running, two GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "unit-state"
    state.write_text("active running")
    smi = tmp_path / "smi"
    smi.write_text(SMI_ROWS)
    # the unit's control group is this process's: the test's server, in this process, is the unit's listener
    own = [line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
           if line.split(":")[1] in ("", "name=systemd")][0]
    _script(bin_dir / "systemctl", f"""case "$*" in *ControlGroup*) echo '{own}'; exit 0;; esac
set -- $(cat {state})
printf 'Id=sglang-dflash@a.service\\nLoadState=loaded\\n'
printf 'ActiveState=%s\\nSubState=%s\\nUnitFileState=enabled\\n' "$1" "$2"
printf 'FragmentPath=/etc/systemd/system/sglang-dflash@.service\\nDropInPaths=\\nNeedDaemonReload=no\\n'
""")
    _script(bin_dir / "nvidia-smi", f"cat {smi}\n")
    # root's own directory (programs.py takes programs only from directories root alone can change)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    release = tmp_path / "releases" / "r1"
    (release / "lib").mkdir(parents=True)
    (release / "lib" / "mod.py").write_text("x = 1\n")
    config = tmp_path / "a.env"
    config.write_text("SGLANG_API_KEY=k\n")
    config.chmod(0o640)
    lock_input = tmp_path / "index"
    lock_input.write_text("pkg==1.0 --hash=sha256:aa\n")
    args = {"path": str(tmp_path / "state" / "converged.json"), "key": KEY, "release": "r1",
            "files": [str(config), str(tmp_path / "gone-on-purpose")], "dirs": [str(tmp_path / "releases")],
            "trees": [str(release)], "units": ["sglang-dflash@a.service"],
            "users": ["root"], "groups": ["root"],
            "command": {"argv": ["/bin/sh", "-c", f"cat {lock_input}; cat"], "stdin": "pkg", "env": {"X": "1"}}}
    return {"tmp": tmp_path, "args": args, "state": state, "smi": smi, "release": release, "config": config,
            "lock_input": lock_input}


def record(host):
    rc, out = run_module("deploy_state", dict(host["args"], state="recorded"))
    assert rc == 0 and out["changed"] is True, out
    return out


def check(host, key=None, check_mode=False, command=None):
    """A check as the role runs it: this run's lock command given (the record keeps only its digest)."""
    args = {"path": host["args"]["path"], "key": key or KEY, "command": command or host["args"]["command"]}
    rc, out = run_module("deploy_state", args, check=check_mode)
    assert rc == 0 and out["changed"] is False, out
    return out


def test_no_record_is_not_converged(host):
    out = check(host)
    assert out["converged"] is False and out["reasons"] == ["no record of a completed deploy on this host"]


def test_record_is_roots_alone_and_holds_no_secret(host):
    record(host)
    path = Path(host["args"]["path"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "SGLANG_API_KEY" not in path.read_text() and "=k" not in path.read_text()


@pytest.mark.parametrize("check_mode", [False, True])
def test_unchanged_host_is_converged(host, check_mode):
    record(host)
    out = check(host, check_mode=check_mode)
    assert out["converged"] is True and out["reasons"] == [], out
    assert out["release"] == "r1" and out["checks"] == 10


def test_changed_inputs(host):
    record(host)
    out = check(host, key=dict(KEY, vars="v2"))
    assert out["converged"] is False
    assert out["reasons"] == ["the deploy's variables changed since the last completed deploy"]


def test_config_file_drift(host):
    record(host)
    host["config"].chmod(0o644)
    assert check(host)["reasons"] == [f"{host['config']} changed (mode)"]


def test_tampered_release_file(host):
    record(host)
    mod = host["release"] / "lib" / "mod.py"
    st = mod.stat()
    mod.write_text("x = 2\n")  # same size
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert check(host)["reasons"] == [f"files of release {host['release']} changed since it was verified"]


def test_stopped_unit(host):
    record(host)
    host["state"].write_text("inactive dead")
    assert check(host)["reasons"] == ["sglang-dflash@a.service is inactive (dead), not running"]


def test_gpu_gone(host):
    record(host)
    host["smi"].write_text(SMI_ROWS.splitlines()[0] + "\n")
    assert check(host)["reasons"] == ["GPU GPU-b is no longer listed"]


def test_index_resolves_otherwise(host):
    record(host)
    host["lock_input"].write_text("pkg==1.1 --hash=sha256:bb\n")
    assert check(host)["reasons"] == [
        "the package lock (uv pip compile) resolves otherwise than at the last completed deploy"]


def test_absent_removes_the_record(host):
    record(host)
    rc, out = run_module("deploy_state", {"path": host["args"]["path"], "state": "absent"}, check=True)
    assert rc == 0 and out["changed"] is True and Path(host["args"]["path"]).exists()
    rc, out = run_module("deploy_state", {"path": host["args"]["path"], "state": "absent"})
    assert rc == 0 and out["changed"] is True and not Path(host["args"]["path"]).exists()
    assert check(host)["reasons"] == ["no record of a completed deploy on this host"]


def test_a_record_of_another_version_is_not_trusted(host):
    record(host)
    path = Path(host["args"]["path"])
    data = json.loads(path.read_text())
    data["version"] = 99
    path.write_text(json.dumps(data))
    assert check(host)["reasons"] == ["the record of the last deploy is of another collection version"]


class _Serving:
    """GET /health_generate and /v1/models on 127.0.0.1, answering only with the env file's key."""

    def __init__(self, key):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.headers.get("Authorization") != "Bearer " + key:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = b"" if self.path == "/health_generate" else json.dumps({"data": [{"id": "m"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_instances_must_answer_with_their_model(host):
    serving = _Serving("k")
    try:
        host["args"]["instances"] = [{"name": "a", "port": serving.port, "served_model_name": "m",
                                      "env_file": str(host["config"])}]
        record(host)
        assert check(host)["converged"] is True
    finally:
        serving.stop()
    reasons = check(host)["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith("instance a: /health_generate answered nothing"), reasons


def test_a_digest_the_deploy_took_of_the_lock_is_kept_and_compares(host):
    """The deploy hands the digest of the stdout Ansible's command module returned (trailing newlines
    removed, hashed on the controller); the record keeps it and a check's own run compares with it."""
    import hashlib

    printed = host["lock_input"].read_text() + "pkg"  # what the command prints: the file, then its stdin
    digest = hashlib.sha256(printed.rstrip("\n").encode()).hexdigest()
    host["args"]["command"] = dict(host["args"]["command"], sha256=digest)
    record(host)
    assert check(host)["converged"] is True
    host["args"]["command"]["sha256"] = "0" * 64
    record(host)
    assert check(host)["reasons"] == [
        "the package lock (uv pip compile) resolves otherwise than at the last completed deploy"]


NOBODY = 65534  # the service user, as far as ownership goes


# Round 3, N2: the service user owned the record's directory, planted the temporary file the record was written
# through, then put its own command in the record, and the next run's check ran it as root.

def _forged(host, canary: Path) -> dict:
    """The record as the service user would edit it: its command writes the canary."""
    from ansible_collections.dflash.deploy.plugins.module_utils.converged import compare

    data = json.loads(Path(host["args"]["path"]).read_text())
    command = {"argv": ["/bin/sh", "-c", f"id > {canary}; cat {host['lock_input']}"], "stdin": "", "env": {}}
    data["command"] = dict(command, sha256="0" * 64, digest=compare.command_digest(command))
    return data


def _tree(top: Path) -> dict:
    """Every entry under top: (uid, mode, bytes) - what must not change when a write is refused."""
    out = {}
    for path in [top, *sorted(top.rglob("*"))]:
        st = path.lstat()
        out[str(path)] = (st.st_uid, st.st_mode, path.read_bytes() if path.is_file() and not path.is_symlink() else b"")
    return out


def _hostile(kind: str, state: Path) -> Path:
    """Make the record's directory (or the one above it) the service user's in one way; the path to name."""
    if kind == "owner":
        os.chown(state, NOBODY, NOBODY)
        return state
    if kind == "group-write":
        state.chmod(0o770)
        return state
    if kind == "parent":
        state.parent.chmod(0o777)
        return state.parent
    elsewhere = state.parent / "elsewhere"
    state.rename(elsewhere)
    state.symlink_to(elsewhere)
    os.chown(state, NOBODY, NOBODY, follow_symlinks=False)
    return state


@pytest.mark.parametrize("kind", ["owner", "group-write", "parent", "link"])
def test_a_record_the_service_user_could_write_is_never_trusted(host, kind):
    record(host)
    path = Path(host["args"]["path"])
    canary = host["tmp"] / "rt3-record-pwn"
    forged = _forged(host, canary)
    path.write_text(json.dumps(forged))
    os.chown(path, NOBODY, NOBODY)
    named = _hostile(kind, path.parent)
    before = _tree(host["tmp"] / "state") if kind != "link" else _tree(host["tmp"] / "elsewhere")
    parent_mode = path.parent.parent.stat().st_mode

    out = check(host)
    assert out["converged"] is False and len(out["reasons"]) == 1, out
    assert out["reasons"][0].startswith(f"the record's directory {named} " if kind != "parent"
                                        else f"the directory {named} is writable by group or others"), out
    assert out["checks"] == 0 and not canary.exists()
    for state in ("recorded", "absent"):
        rc, out = run_module("deploy_state", dict(host["args"], state=state))
        assert rc != 0 and out["msg"].startswith("deploy record refused, nothing was changed: ") and \
            "\n" not in out["msg"], out
    assert (_tree(host["tmp"] / "state") if kind != "link" else _tree(host["tmp"] / "elsewhere")) == before
    assert path.parent.parent.stat().st_mode == parent_mode and not canary.exists()


def test_a_record_not_roots_alone_in_roots_directory_is_not_trusted(host):
    record(host)
    path = Path(host["args"]["path"])
    canary = host["tmp"] / "rt3-record-pwn"
    path.write_text(json.dumps(_forged(host, canary)))
    os.chown(path, NOBODY, NOBODY)
    reasons = check(host)["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith(f"the record {path} is owned by ") and "mode 0600" in reasons[0]
    os.chown(path, 0, 0)
    path.chmod(0o666)
    reasons = check(host)["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith(f"the record {path} is owned by root with mode 0666")
    assert not canary.exists()


def test_the_check_never_runs_a_command_from_the_record(host):
    """Even a record of root's: the check runs this run's command, and only when its digest is the recorded one."""
    record(host)
    path = Path(host["args"]["path"])
    assert "argv" not in json.loads(path.read_text())["command"] and "cat" not in path.read_text()
    canary = host["tmp"] / "rt3-record-pwn"
    path.write_text(json.dumps(_forged(host, canary)))
    assert check(host)["reasons"] == [
        "the package lock (uv pip compile) itself changed since the last completed deploy"]
    rc, out = run_module("deploy_state", {"path": str(path), "key": KEY, "command": {}})
    assert rc == 0 and out["reasons"] == ["the package lock (uv pip compile) could not be named before the deploy "
                                          "(a variable it uses did not template)"], out
    assert not canary.exists()


def test_planted_temporary_files_never_become_the_record(host):
    """The record was written through converged.json.<pid>.tmp opened without O_EXCL: a file the service user
    planted under each coming pid became the record, the service user's. Now a new file is made (mkstemp)."""
    record(host)
    path = Path(host["args"]["path"])
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    planted = [path.parent / f"converged.json.{pid}.tmp" for pid in range(last + 1, last + 3000)]
    for name in planted:
        name.touch()
        os.chown(name, NOBODY, NOBODY)
    record(host)
    st = path.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600) and json.loads(path.read_text())["release"] == "r1"
    assert all(p.lstat().st_uid == NOBODY and p.lstat().st_size == 0 for p in planted)
    assert sorted(os.listdir(path.parent)) == sorted([path.name] + [p.name for p in planted])


def test_a_missing_directory_is_made_roots_and_an_existing_one_is_never_changed(host, tmp_path):
    """M6 in the module: only a directory it made is made 0700; a root directory of mode 0755 keeps it."""
    shared = tmp_path / "varlib"
    shared.mkdir()
    shared.chmod(0o755)
    host["args"]["path"] = str(shared / "rt3-converged.json")
    record(host)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "rt3-converged.json").stat().st_mode) == 0o600
    assert check(host)["converged"] is True


def test_a_dripping_instance_ends_the_check_within_its_health_timeout(host):
    """Round 3, M1: deploy_state health_timeout=5 against an instance dripping its answer ran for ever."""
    import time

    from drip_server import drip_server

    with drip_server(length=1000) as (base, _server):
        host["args"]["instances"] = [{"name": "a", "port": int(base.rsplit(":", 1)[1]), "served_model_name": "m",
                                      "env_file": str(host["config"])}]
        record(host)
        start = time.monotonic()
        rc, out = run_module("deploy_state", {"path": host["args"]["path"], "key": KEY, "health_timeout": 1,
                                              "command": host["args"]["command"]}, timeout=30)
        assert time.monotonic() - start < 6
    assert rc == 0 and out["converged"] is False
    assert out["reasons"] == ["instance a: /health_generate answered nothing: no complete answer within 1s "
                              "(the deadline of the whole exchange)"]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_path_directory_someone_else_owns_ends_the_check_before_anything_runs(host, monkeypatch):
    """Round 3's N1 on the fast path: the service user owns a directory on root's PATH and planted
    systemctl, nvidia-smi and python3 there. The check answers 'not converged', naming the directory,
    before it runs anything: no planted program ran, and the record's own command did not run either."""
    record(host)
    planted = host["tmp"] / "usr-local-sbin"
    planted.mkdir()
    canary = host["tmp"] / "ran-as-root"
    for name in ("systemctl", "nvidia-smi", "python3", "uv", "sh", "cat"):
        _script(planted / name, f'echo "$0 $*" >> {canary}\n')
    os.chown(planted, NOBODY, -1)
    monkeypatch.setenv("PATH", f"{planted}:{os.environ['PATH']}")
    out = check(host)
    assert out["converged"] is False and out["checks"] == 2, out
    assert out["reasons"] == [f"host layout: {planted} is owned by nobody, not root: whoever owns it can replace "
                              "what is below it; chown root:root it (on root's PATH: a command root runs by name "
                              "could be replaced)"], out
    assert not canary.exists()
    # As it was, the same host is converged again: nothing else differed.
    monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
    assert check(host)["converged"] is True


def test_a_directory_above_what_the_record_keeps_made_writable_ends_the_check(host):
    """Round 3's N1 (S7 part): /opt or /etc/systemd/system made 0777 after a deploy sends the run down the
    full path (whose layout read refuses it), instead of the fast path."""
    opt = host["tmp"] / "opt"
    (opt / "dflash").mkdir(parents=True)
    host["args"]["dirs"] = [str(opt / "dflash")]
    record(host)
    opt.chmod(0o777)
    out = check(host)
    assert out["converged"] is False and out["checks"] == 2, out
    assert out["reasons"] == [f"host layout: {opt} is writable by others (mode 0777): whoever can write it "
                              "can replace what is below it; chmod go-w it"], out


def test_an_index_with_credentials_stays_out_of_the_record_and_a_new_index_is_seen(host):
    """Security m4: the lock command's env names the index (UV_DEFAULT_INDEX) with a token. The record keeps
    only digests (no token, no URL), the module's answer masks the token, and a check given another index is
    not converged (the fast path still sees a change of index)."""
    token = "s3cr3t-T0ken"
    command = dict(host["args"]["command"], env={"UV_DEFAULT_INDEX": f"https://deploy:{token}@127.0.0.1:9/simple"})
    host["args"]["command"] = command
    rc, out = run_module("deploy_state", dict(host["args"], state="recorded", **INJECT_INVOCATION))
    assert rc == 0 and out["changed"] is True, out
    assert token not in json.dumps(out) and "********" in json.dumps(out["invocation"])
    text = Path(host["args"]["path"]).read_text()
    assert token not in text and "127.0.0.1:9" not in text
    assert check(host)["converged"] is True
    other = dict(command, env={"UV_DEFAULT_INDEX": "https://deploy:other-T0ken@127.0.0.1:9/simple"})
    out = check(host, command=other)
    assert out["converged"] is False and token not in json.dumps(out)
    assert out["reasons"] == ["the package lock (uv pip compile) itself changed since the last completed deploy"]


def test_a_host_s_own_uv_or_pip_configuration_keeps_the_run_off_the_fast_path(tmp_path, monkeypatch):
    """Issue 44 item 4: a uv.toml or pip.conf that appears after a deploy is never silently ignored. The
    check's control step names it, so the run takes the full path, whose preflight refuses it (or, with
    host_preflight_host_config: warn, warns and records it: then the fast path is open again)."""
    from ansible_collections.dflash.deploy.plugins.modules import deploy_state as M

    conf = tmp_path / "uv.toml"
    monkeypatch.setattr(M.U, "HOST_CONFIG_FILES", ((str(conf), "uv"),))
    assert not [r for r in M.control_reasons({}) if "uv.toml" in r]
    conf.write_text('index-url = "http://192.0.2.9/simple"\n')
    [reason] = [r for r in M.control_reasons({}) if "uv.toml" in r]
    assert reason.startswith(f"{conf} (uv configuration) on the host: the deploy runs uv with UV_NO_CONFIG=1")
    recorded = {"host_config": M.host_config()}
    assert recorded == {"host_config": [[str(conf), "uv"]]}
    assert not [r for r in M.control_reasons(recorded) if "uv.toml" in r]
    conf.unlink()
    assert [r for r in M.control_reasons(recorded) if "uv.toml" in r] == [
        f"{conf}: gone since the last deploy, which found it"]
