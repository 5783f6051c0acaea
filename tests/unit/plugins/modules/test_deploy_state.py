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
from module_runner import run_module  # noqa: E402

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


def check(host, key=None, check_mode=False):
    rc, out = run_module("deploy_state", {"path": host["args"]["path"], "key": key or KEY}, check=check_mode)
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
    assert out["release"] == "r1" and out["checks"] == 9


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
