"""Root never follows the service user, and nothing reaches the env file unchecked (docs/security.md).

Against ct200 with one deploy reused by every case, in order (each case leaves ct200 deployed):

  a. the service user's symlink attack: /var/lib/dflash and /var/cache/dflash as earlier versions left
     them (sglang:sglang 0750), and as sglang: qwen3-8b's state directory replaced by a symlink to a
     root-owned canary directory, one planted for an instance not deployed yet. The deploy is refused
     before any change, naming both paths; the canary keeps its owner and mode; the server runs on.
  b. after a deploy /var/lib/dflash and /var/cache/dflash are root's, 0755.
  c. a newline in an `environment` value and in an `extra_args` item: refused before any change; the
     env file's bytes and the server's /proc/<MainPID>/environ are unchanged.
  d. `chmod 0777` on the layout (and the old sglang-owned parents): the next deploy puts every mode
     back and says so ("host layout: ... put back"); a value with quotes, `$`, backslash and `%`
     reaches the server's environment byte for byte; a second deploy changes nothing. The service user
     added to the `disk` group is taken out of it, and the restarted server runs without it (round 3's M2).
  d2. /usr/local/sbin handed to the service user, which planted systemctl, nvidia-smi, python3 and uv: the
     deploy and rollback.yml stop before anything runs, naming it; none of them ran (round 3's N1).
  d3. /var/lib/dflash-deploy handed to sglang, which forged the fast-path record with a command of its own and
     planted links where the record used to be written through: the deploy refuses in one line, the command never
     ran, nothing it planted was followed (round 3's N2).
  d4. an instance bound off loopback is refused; a local user holding 127.0.0.1:30001 while the instance is down
     gets neither request nor key from readiness, which names her; the server's Errno 98 is diagnosed (N7).
  e. artifacts pinned by hash: the fixtures' wheels as a wheelhouse give the release id the index
     gave (the same bytes, the same id); the same wheelhouse with triton 3.6.0 carrying a planted
     `.pth` (right name and version) is refused by hash, naming the wheel, before any release is
     built: the releases, the server and its environment are unchanged and the `.pth` never ran.
  f. a model directory staged from the controller (`model_controller_dir`) below a parent the operator
     handed to sglang, where sglang planted a link: refused before any change, naming both; once put
     right, the weights are staged root:sglang 0640.
(`state: absent` after planted links, and prune with a relative `previous`, ride on the removal
deploy of the two_instances scenario.)
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile

import pytest
from conftest import REPO, VENV_BIN, adhoc, ansible_env, lab

HOST = "ct200"
INSTANCE = {"name": "qwen3-8b", "gpus": [1], "port": 30001, "model_path": "/srv/models/Qwen3-8B",
            "draft_model_path": "/srv/models/Qwen3-8B-DFlash-b16", "served_model_name": "qwen3-8b-dflash",
            "extra_args": ["--disable-cuda-graph"]}
QUOTING = "%h $(id) `id` 'q\" \\ x  100%"
LAYOUT = ["/opt/dflash", "/opt/dflash/instances", "/opt/dflash/instances/qwen3-8b", "/opt/dflash/bin",
          "/opt/dflash/cache", "/etc/dflash", "/var/lib/dflash", "/var/cache/dflash"]
TIMES: dict[str, float] = {}


def host():
    return next(h for h in lab.hosts() if h.name == HOST)


def sh(script: str, check=True) -> str:
    return lab.hexec(host(), script, check=check).stdout


def deploy(*extra, label) -> dict:
    """deploy_dflash.yml -l ct200 with the JSON callback; returns {rc, stats, failed: [msg], results: {task: [...]}}."""
    t0 = time.monotonic()
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "playbooks/deploy_dflash.yml", "-l", HOST, *extra],
                          cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=900)
    TIMES[label] = round(time.monotonic() - t0, 1)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"rc {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}") from None
    failed, results, changed = [], {}, []
    for play in out["plays"]:
        for task in play["tasks"]:
            res = task["hosts"].get(HOST)
            if res is None:
                continue
            results.setdefault(task["task"]["name"], []).append(res)
            if res.get("changed"):
                changed.append(task["task"]["name"])
            if res.get("failed") and not res.get("ignore_errors"):
                failed.append(res.get("msg") or "")
                failed += [r.get("msg") or "" for r in res.get("results") or [] if r.get("failed")]
    return {"rc": proc.returncode, "stats": out["stats"][HOST], "failed": failed, "results": results,
            "changed": changed}


def with_instances(*instances, environment=None) -> list:
    return ["-e", json.dumps({"sglang_service_instances": list(instances),
                              **({"sglang_service_environment": environment} if environment else {})})]


def server_state() -> dict:
    """What must not change when a deploy is refused: the env file, the server's process and environment."""
    pid = sh("systemctl show -p MainPID --value sglang-dflash@qwen3-8b.service").strip()
    environ = sh(f"runuser -u sglang -- cat /proc/{pid}/environ | base64 -w0")
    env_file = sh("base64 -w0 /etc/dflash/qwen3-8b.env")
    tree = sh("find /opt/dflash/instances /etc/dflash /etc/systemd/system -printf '%p %U %G %m %l\\n' | sort")
    return {"pid": pid, "environ": environ, "env_file": env_file,
            "tree": hashlib.sha256(tree.encode()).hexdigest()}


def refused_before_any_change(out):
    assert out["rc"] != 0, out["stats"]
    assert out["changed"] == [] and out["stats"]["changed"] == 0, out["changed"]


def stat(path: str) -> str:
    return sh(f"stat -c '%U:%G %a' {path}").strip()


CLEANUP = """
for d in /var/lib/dflash /var/cache/dflash; do
  if [ -L $d/qwen3-8b ]; then rm $d/qwen3-8b; fi
  if [ -d $d/qwen3-8b.old ]; then mv $d/qwen3-8b.old $d/qwen3-8b; fi
  rm -f $d/future
done
rm -rf /etc/canary-dir /etc/canary-future
"""


@pytest.fixture(scope="module")
def deployed():
    out = deploy(label="first deploy")
    assert out["rc"] == 0, out["failed"]
    yield out
    sh(CLEANUP, check=False)
    print(f"\ntest_security deploy times (s): {TIMES}")


def test_state_and_cache_parents_are_roots_after_a_deploy(deployed):
    assert stat("/var/lib/dflash") == "root:root 755"
    assert stat("/var/cache/dflash") == "root:root 755"
    assert stat("/var/lib/dflash/qwen3-8b") == "sglang:sglang 750"


def test_planted_symlinks_are_refused_before_any_change(deployed):
    # The host as earlier versions left it, and what the service user could then do.
    sh("""
    mkdir -p /etc/canary-dir /etc/canary-future; chmod 0755 /etc/canary-dir /etc/canary-future
    chown sglang:sglang /var/lib/dflash /var/cache/dflash; chmod 0750 /var/lib/dflash /var/cache/dflash
    runuser -u sglang -- sh -c 'mv /var/lib/dflash/qwen3-8b /var/lib/dflash/qwen3-8b.old &&
      ln -s /etc/canary-dir /var/lib/dflash/qwen3-8b && ln -s /etc/canary-future /var/cache/dflash/future'
    """)
    try:
        before = server_state()
        future = {**INSTANCE, "name": "future", "gpus": [2], "port": 30002, "served_model_name": "future"}
        out = deploy(*with_instances(INSTANCE, future), label="refused: symlinks")
        refused_before_any_change(out)
        message = "; ".join(out["failed"])
        assert "host layout: /var/lib/dflash/qwen3-8b is a symlink (-> /etc/canary-dir) made by sglang" in message
        assert "host layout: /var/cache/dflash/future is a symlink (-> /etc/canary-future) made by sglang" in message
        assert "\n" not in message
        assert stat("/etc/canary-dir") == "root:root 755"
        assert stat("/etc/canary-future") == "root:root 755"
        assert server_state() == before
    finally:
        sh(CLEANUP)


def test_a_newline_in_environment_or_extra_args_is_refused_before_any_change(deployed):
    before = server_state()
    bad = {**INSTANCE, "extra_args": ["--disable-cuda-graph\nINJECTED_BY_EXTRA_ARGS=1"],
           "environment": {"X_NOTE": "a\nSGLANG_API_KEY="}}
    out = deploy(*with_instances(bad, environment={"LD_PRELOAD_NOTE": "x\nLD_PRELOAD=/tmp/x.so"}),
                 label="refused: newlines")
    refused_before_any_change(out)
    message = "; ".join(out["failed"])
    assert "instance qwen3-8b: extra_args[0] holds a newline" in message
    assert "instance qwen3-8b: environment X_NOTE holds a newline" in message
    assert "sglang_service_environment LD_PRELOAD_NOTE holds a newline" in message
    assert "LD_PRELOAD=" not in message and "SGLANG_API_KEY=" not in message  # values are not repeated
    assert server_state() == before


def test_a_loosened_layout_is_put_back_and_reported(deployed):
    # and the service user added to the raw disks' group (round 3's M2): taken away before the restart
    sh("chmod 0777 " + " ".join(LAYOUT) + "; chown sglang:sglang /var/lib/dflash /var/cache/dflash"
       "; usermod -aG disk sglang")
    out = deploy(*with_instances(INSTANCE, environment={"DFLASH_QUOTING": QUOTING}), label="layout put back")
    assert out["rc"] == 0, out["failed"]
    want = {"/etc/dflash": "root:sglang 750", "/opt/dflash/cache": "root:root 700"}
    for path in LAYOUT:
        assert stat(path) == want.get(path, "root:root 755"), path
    reports = [res["ansible_facts"]["dflash_deploy_report"] for name, results in out["results"].items()
               if name.endswith("Report the release and what it serves") for res in results]
    changes = [line for report in reports for line in report["changes"]]
    assert "host layout: /opt/dflash mode 0777 -> 0755 put back" in changes, changes
    uid, gid = sh("id -u sglang; id -g sglang").split()
    assert f"host layout: /var/lib/dflash owner {uid} -> 0, group {gid} -> 0, mode 0777 -> 0755 put back" in changes
    assert "host layout: /opt/dflash/cache mode 0777 -> 0700 put back" in changes, changes
    # uv's lock files are 0666: nobody but root can reach them now.
    held = sh("runuser -u sglang -- sh -c 'exec 9>>/opt/dflash/cache/uv/.lock' 2>&1; echo rc=$?", check=False)
    assert "Permission denied" in held and "rc=0" not in held, held
    # The env file's quoting reaches the server as the value itself (systemd's EnvironmentFile= rules).
    pid = sh("systemctl show -p MainPID --value sglang-dflash@qwen3-8b.service").strip()
    environ = sh(f"runuser -u sglang -- cat /proc/{pid}/environ").split("\0")
    assert f"DFLASH_QUOTING={QUOTING}" in environ
    assert "disk" not in sh("id -nG sglang").split()
    disk = sh("getent group disk | cut -d: -f3").strip()
    groups = sh(f"grep '^Groups:' /proc/{pid}/status").split()[1:]
    assert disk not in groups, groups
    assert "SGLANG_EXTRA_ARGS=--disable-cuda-graph" in environ and "SGLANG_PORT=30001" in environ
    # Every variable of the env file, read as sh reads it, is what the server runs with.
    env_as_sh = sh("env -i sh -c 'set -a; . /etc/dflash/qwen3-8b.env; unset PATH PWD SHLVL _; /usr/bin/env -0'")
    env_as_sh = env_as_sh.split("\0")
    assert set(filter(None, env_as_sh)) <= set(environ)
    # Re-run: nothing to put back, nothing changed.
    again = deploy(*with_instances(INSTANCE, environment={"DFLASH_QUOTING": QUOTING}), label="second deploy")
    assert again["rc"] == 0 and again["stats"]["changed"] == 0, again["stats"]


PLANTED_BIN = "/var/tmp/dflash-planted-ran"
WRAPPER = (r"printf '#!/bin/sh\necho \"\$(id -u) \$0 \$*\" >> %s\nexec /usr/bin/$cmd \"\$@\"\n'"
           r" > /usr/local/sbin/$cmd; chmod 755 /usr/local/sbin/$cmd") % PLANTED_BIN
PLANT = f"""
chown sglang /usr/local/sbin
for cmd in systemctl nvidia-smi python3 uv; do
  runuser -u sglang -- sh -c "{WRAPPER}"
done
"""
UNPLANT = "rm -f /usr/local/sbin/systemctl /usr/local/sbin/nvidia-smi /usr/local/sbin/python3 /usr/local/sbin/uv; " \
          "chown root:root /usr/local/sbin; chmod 0755 /usr/local/sbin"


def test_a_path_directory_the_service_user_owns_stops_every_entry_point_before_it_runs_anything(deployed):
    """Round 3's N1: /usr/local/sbin (first on root's PATH) handed to sglang, which planted systemctl,
    nvidia-smi, python3 and uv there. The deploy (the fast path falls to the full path) and rollback.yml stop
    before anything runs, naming the directory; none of the planted programs ran; the server runs on."""
    before = server_state()
    sh(f"rm -f {PLANTED_BIN}; " + PLANT)
    try:
        out = deploy(label="refused: PATH")
        refused_before_any_change(out)
        message = "; ".join(out["failed"])
        assert "host layout: /usr/local/sbin is owned by sglang, not root" in message, message
        assert "on root's PATH" in message
        rollback = subprocess.run([str(VENV_BIN / "ansible-playbook"), "playbooks/rollback.yml", "-l", HOST],
                                  cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=300)
        assert rollback.returncode != 0 and "/usr/local/sbin is owned by sglang, not root" in rollback.stdout
        assert sh(f"cat {PLANTED_BIN} 2>/dev/null || true") == ""  # nothing planted ran, as root or anyone
        assert server_state() == before
    finally:
        sh(UNPLANT + f"; rm -f {PLANTED_BIN}")


RECORD_DIR = "/var/lib/dflash-deploy"
FORGED_RAN = "/var/tmp/dflash-forged-record-ran"


def test_a_record_the_service_user_forged_is_neither_trusted_nor_run(deployed):
    """Round 3's N2: /var/lib/dflash-deploy handed to sglang, which rewrote the fast-path record with a command
    of its own and planted the names the record used to be written through (links to a root file). The next
    deploy trusts none of it: the check takes the full path, which refuses to touch the record in one line,
    naming the directory and its owner; the forged command never ran, the links and their target are as
    planted, and the server runs on."""
    # The record a completed deploy leaves (an earlier case's refused run may have removed it: deploy again).
    if sh(f"test -f {RECORD_DIR}/converged.json && echo yes || echo no").strip() != "yes":
        out = deploy(label="a completed deploy, for its record")
        assert out["rc"] == 0, out["failed"]
    assert sh(f"test -f {RECORD_DIR}/converged.json && echo yes || echo no").strip() == "yes"
    record = json.loads(sh(f"cat {RECORD_DIR}/converged.json"))
    record["command"] = {"argv": ["/bin/sh", "-c", f"id -u > {FORGED_RAN}"], "stdin": "", "env": {}}
    forged = base64.b64encode(json.dumps(record).encode()).decode()
    sh(f"rm -f {FORGED_RAN}; mkdir -p /etc/canary-dir && echo canary > /etc/canary-dir/file"
       f" && chmod 0755 /etc/canary-dir && chmod 0644 /etc/canary-dir/file; chown -R sglang:sglang {RECORD_DIR}")
    sh(f"""runuser -u sglang -- sh -c 'cd {RECORD_DIR} && echo {forged} | base64 -d > forged && mv forged converged.json
        for pid in $(seq 1 300); do ln -s /etc/canary-dir/file converged.json.$pid.tmp; done'""")
    try:
        before = server_state()
        forged_sha = sh(f"sha256sum < {RECORD_DIR}/converged.json")
        out = deploy(label="refused: forged record")
        assert out["rc"] != 0, out["stats"]
        message = "; ".join(out["failed"])
        print(f"\nrefusal: {message}")
        assert "deploy record refused, nothing was changed: " in message, message
        assert f"{RECORD_DIR} is owned by sglang, not root" in message, message
        assert "\n" not in message
        assert sh(f"test -e {FORGED_RAN} && echo ran || echo never").strip() == "never"
        assert sh("cat /etc/canary-dir/file") == "canary\n" and stat("/etc/canary-dir/file") == "root:root 644"
        assert sh(f"find {RECORD_DIR} -name 'converged.json.*.tmp' -type l -lname /etc/canary-dir/file | wc -l"
                  ).strip() == "300"
        assert sh(f"sha256sum < {RECORD_DIR}/converged.json") == forged_sha  # an existing record is never changed
        assert stat(RECORD_DIR).startswith("sglang:sglang")                 # nor its directory
        assert not any(name.rsplit(" : ", 1)[0].endswith(("sglang_service", "sglang_venv")) for name in out["changed"])
        assert server_state() == before
    finally:
        # The operator puts it right: a new deploy makes the directory anew, root's.
        sh(f"rm -rf {RECORD_DIR} /etc/canary-dir {FORGED_RAN}")


MALLORY_HEARD = "/var/tmp/dflash-mallory-heard"
MALLORY = f"""
import http.server


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open({MALLORY_HEARD!r}, "a") as heard:
            heard.write(self.requestline + " " + repr(sorted(self.headers.items())) + "\\n")
        body = b'{{"data": [{{"id": "qwen3-8b-dflash"}}]}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


http.server.HTTPServer(("127.0.0.1", 30001), Answer).serve_forever()
"""
UNIT = "sglang-dflash@qwen3-8b.service"


def journal_filter():
    spec = importlib.util.spec_from_file_location("dflash_journal_filter",
                                                  REPO / "plugins" / "filter" / "journal_exception.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_port_someone_else_holds_gets_neither_request_nor_key_and_is_named(deployed):
    """Round 3's N7. (a) An instance bound to the host's address leaves 127.0.0.1:<port> to any local user: refused
    before any change. (b) An ordinary user (mallory) takes 127.0.0.1:30001 while the instance is stopped, as in a
    restart: readiness sends her no request and no key, and fails naming her process; the server then dies of
    `[Errno 98]`, and the journal's diagnosis names the port in use. Her listener gone, the instance serves again."""
    before = server_state()
    out = deploy(*with_instances({**INSTANCE, "host": "10.89.64.200"}), label="refused: host off loopback")
    refused_before_any_change(out)
    message = "; ".join(out["failed"])
    assert "instance qwen3-8b: host 10.89.64.200 does not take connections to 127.0.0.1" in message, message
    assert server_state() == before

    # The probe reads the key from the env file it is given: one with a key (the lab's instance has none).
    key = "n7-" + os.urandom(12).hex()
    sh(f"install -m 0600 /dev/null /var/tmp/dflash-n7.env && echo 'SGLANG_API_KEY=\"{key}\"' > /var/tmp/dflash-n7.env")
    ready = ("base=http://127.0.0.1:30001 model=qwen3-8b-dflash unit=" + UNIT +
             " env_file=/var/tmp/dflash-n7.env timeout=20 interval=1 max_restarts=10")
    sh(f"id mallory >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin mallory; rm -f {MALLORY_HEARD}"
       f"; install -o mallory -m 0644 /dev/null /var/tmp/dflash-mallory.py")
    sh(f"cat > /var/tmp/dflash-mallory.py <<'EOF'\n{MALLORY}\nEOF")
    since = sh("date +%s").strip()
    try:
        sh(f"systemctl stop {UNIT}")
        sh("setsid -f runuser -u mallory -- python3 /var/tmp/dflash-mallory.py >/dev/null 2>&1 </dev/null; for i in"
           " $(seq 50); do grep -q ' 0100007F:7531 00000000:0000 0A ' /proc/net/tcp && exit 0; sleep 0.2; done; exit 1")
        uid = sh("id -u mallory").strip()
        res = adhoc(HOST, "dflash.deploy.instance_ready", ready)[HOST]
        assert res.get("failed"), res
        # root in a container may not read another user's /proc/<pid>/fd: the holder is named by its uid then
        assert res["msg"].startswith("port 30001 on 127.0.0.1 is held by "), res
        assert f"uid {uid} mallory" in res["msg"], res
        assert res["msg"].endswith(f"not by {UNIT}: the key was not sent") and key not in res["msg"], res
        # The instance starts into the taken port and dies of it; the diagnosis says so.
        sh(f"systemctl start {UNIT}; for i in $(seq 50); do journalctl -o cat -u {UNIT} --since @{since}"
           " | grep -q 'Errno 98' && exit 0; sleep 0.2; done; exit 1")
        lines = sh(f"journalctl -o cat -u {UNIT} --since @{since}").splitlines()
        assert journal_filter().journal_exception(lines).startswith(
            "port 30001 is already in use (held by another process)"), lines[-10:]
        assert sh(f"cat {MALLORY_HEARD} 2>/dev/null || true") == ""           # no request, so no key, ever
    finally:
        sh("pkill -u mallory -f dflash-mallory.py; sleep 0.5; rm -f /var/tmp/dflash-mallory.py /var/tmp/dflash-n7.env",
           check=False)
        sh(f"systemctl reset-failed {UNIT}; systemctl restart {UNIT}", check=False)
    res = adhoc(HOST, "dflash.deploy.instance_ready", ready.replace("timeout=20", "timeout=90").replace(
        "/var/tmp/dflash-n7.env", "/etc/dflash/qwen3-8b.env"))[HOST]
    assert not res.get("failed"), res
    assert key not in sh(f"cat {MALLORY_HEARD} 2>/dev/null || true")
    sh(f"rm -f {MALLORY_HEARD}")


WHEELHOUSE = REPO / "build" / "fixtures" / "wheelhouse"
PLANTED = "/var/tmp/dflash-planted-pth-ran"


def current_release() -> str:
    return sh("readlink -f /opt/dflash/instances/qwen3-8b/current").strip()


def test_a_tampered_wheelhouse_wheel_is_refused_by_hash_before_any_change(deployed):
    clean = tempfile.mkdtemp(prefix="dflash-wheelhouse-")
    again = tempfile.mkdtemp(prefix="dflash-wheelhouse-")
    tampered = tempfile.mkdtemp(prefix="dflash-wheelhouse-")
    for d in (clean, again, tampered):
        os.chmod(d, 0o755)  # the tar's "." entry carries the directory's mode to the host
    for wheel in WHEELHOUSE.glob("*.whl"):
        shutil.copy(wheel, clean)
        shutil.copy(wheel, again)
        shutil.copy(wheel, tampered)
    with zipfile.ZipFile(f"{tampered}/triton-3.6.0-py3-none-any.whl", "a") as whl:
        whl.writestr("zz_dflash_planted.pth", f"import os; open({PLANTED!r}, 'w').write(str(os.getuid()))\n")
    source = {"sglang_venv_source": "wheelhouse"}
    try:
        sh(f"rm -f {PLANTED}")
        # From the wheelhouse: a release of its own (uv's lock names the hashes of the wheels this
        # host can install from a wheelhouse, of every wheel of the version from an index; the
        # fixture torch has one per CPython, as torch does).
        out = deploy("-e", json.dumps({**source, "sglang_venv_wheelhouse_controller_dir": clean}),
                     *with_instances(INSTANCE), label="wheelhouse")
        assert out["rc"] == 0, out["failed"]
        running = current_release()
        # The same bytes copied anew: the same lock, hashes and all, so the same release.
        out = deploy("-e", json.dumps({**source, "sglang_venv_wheelhouse_controller_dir": again}),
                     *with_instances(INSTANCE), label="wheelhouse: same bytes")
        assert out["rc"] == 0, out["failed"]
        assert current_release() == running
        releases = sh("ls /opt/dflash/releases")
        before = server_state()
        out = deploy("-e", json.dumps({**source, "sglang_venv_wheelhouse_controller_dir": tampered}),
                     *with_instances(INSTANCE), label="refused: tampered wheel")
        assert out["rc"] != 0, out["stats"]
        # Only the wheelhouse itself was pushed; no release was made, nothing was installed or switched.
        changed = {name.rsplit(" : ", 1)[-1] for name in out["changed"]}
        assert changed <= {"Push the wheelhouse", "Unpack the wheelhouse"}, out["changed"]
        message = "; ".join(out["failed"])
        print(f"\nrefusal: {message}")
        release_id = running.rsplit("/", 1)[1]
        assert "nothing was installed or switched" in message, message
        # Every release on the host that recorded the wheel is named; the running one is among them.
        # (and the fleet's recorded hashes, which the first deploy's build wrote on the controller)
        recorders = re.search(r"is sha256 [0-9a-f]+…, but ((?:release [0-9a-f]{16}(?:, | and | )?)+)"
                              r"(?:the fleet's hashes \([^)]*\) )?recorded sha256 ", message)
        assert "wheel triton-3.6.0-py3-none-any.whl (triton==3.6.0) is sha256 " in message, message
        assert recorders and release_id in re.findall(r"release ([0-9a-f]{16})", recorders.group(1)), message
        assert "\n" not in message
        assert sh("ls /opt/dflash/releases") == releases
        assert server_state() == before
        assert sh(f"test -e {PLANTED} && echo ran || echo never", check=False).strip() == "never"
    finally:
        shutil.rmtree(clean)
        shutil.rmtree(again)
        shutil.rmtree(tampered)
        sh(f"rm -rf /opt/dflash/artifacts/wheelhouse /opt/dflash/artifacts/wheelhouse.tar {PLANTED}", check=False)


def test_a_model_directory_is_staged_only_where_root_alone_can_write(deployed):
    controller = tempfile.mkdtemp(prefix="dflash-model-")
    os.chmod(controller, 0o755)
    config = sh("cat /srv/models/Qwen3-8B/config.json")
    with open(os.path.join(controller, "config.json"), "w") as f:
        f.write(config)
    staged = {**INSTANCE, "model_path": "/srv/staged/Qwen3-8B", "model_controller_dir": controller}
    # An operator's mistake (the parent handed to sglang), and what sglang could then plant.
    sh("rm -rf /srv/staged && mkdir -p /srv/staged /etc/canary-dir && chmod 0755 /etc/canary-dir"
       " && chown sglang:sglang /srv/staged && runuser -u sglang -- ln -s /etc/canary-dir /srv/staged/Qwen3-8B")
    try:
        before = server_state()
        out = deploy(*with_instances(staged), label="refused: staged model dir")
        refused_before_any_change(out)
        message = "; ".join(out["failed"])
        assert "host layout: /srv/staged is owned by sglang, not root: whoever owns it can replace" in message, message
        assert "host layout: /srv/staged/Qwen3-8B is a symlink (-> /etc/canary-dir) made by sglang" in message
        assert sh("ls -A /etc/canary-dir") == "" and stat("/etc/canary-dir") == "root:root 755"
        assert server_state() == before
        # Put right: the weights are staged as root's, readable by the service group only.
        sh("rm /srv/staged/Qwen3-8B && chown root:root /srv/staged")
        out = deploy(*with_instances(staged), label="model staged")
        assert out["rc"] == 0, out["failed"]
        assert stat("/srv/staged/Qwen3-8B") == "root:sglang 750"
        assert stat("/srv/staged/Qwen3-8B/config.json") == "root:sglang 640"
        assert sh("cat /srv/staged/Qwen3-8B/config.json") == config
    finally:
        shutil.rmtree(controller)
        sh("rm -rf /etc/canary-dir; rm -f /srv/staged/Qwen3-8B 2>/dev/null || true", check=False)
