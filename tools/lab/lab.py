#!/usr/bin/env python3
"""The lab: real systemd + sshd test hosts in podman, with fixture GPUs.

    python tools/lab/lab.py up [--targets N]   # everything, idempotent
    python tools/lab/lab.py down               # nothing left but the cached image
    python tools/lab/lab.py status             # exit 0 only when every host answers
    python tools/lab/lab.py reset HOST         # recreate one host from the image, provisioned anew
    python tools/lab/lab.py stop|start|kill HOST
    python tools/lab/lab.py index-delay SECONDS  # each wheel download waits (fault injection)

`make lab-up`, `make lab-down`, `make lab-status` and molecule's create and
destroy all call this file: there is one way to make a lab host.

Layers, each decided in one place below:
  host quirks    detect_quirks() / apply_quirks()   (podman on this kind of machine)
  base image     image_tag() / ensure_image()       (debootstrap, cached by recipe hash)
  network        ensure_network()                   (own subnet, no route out)
  index          ensure_index()                     (fixture index on the gateway address)
  hosts          HOSTS / start_host() / provision() (systemd, sshd, fixture driver, seeding)
  inventory      write_inventory()                  (inventory/lab.yml, ssh key, known_hosts)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STATE = REPO / "build" / "lab"
FIXTURES = REPO / "build" / "fixtures"
SSH_DIR = STATE / "ssh"
INVENTORY = REPO / "inventory" / "lab.yml"
UV = REPO / ".tools" / "uv" / "bin" / "uv"

NETWORK = "dflash-lab"
SUBNET = "10.89.64.0/24"
GATEWAY = "10.89.64.1"
# Offline targets (LAB_OFFLINE=N): a second internal network whose only other address is
# the controller's; the index listens on GATEWAY alone, so they cannot reach it.
OFFLINE_NETWORK = "dflash-lab-offline"
OFFLINE_SUBNET = "10.89.65.0/24"
OFFLINE_GATEWAY = "10.89.65.1"
NETWORKS = {NETWORK: (SUBNET, GATEWAY), OFFLINE_NETWORK: (OFFLINE_SUBNET, OFFLINE_GATEWAY)}
INDEX_PORT = 8631
LABEL = "dflash.lab"
PREFIX = "dflash-lab-"

SUITE = "bookworm"
PACKAGES = (
    "systemd,systemd-sysv,dbus,python3,python3-venv,openssh-server,rsync,"
    "ca-certificates,curl,iproute2,procps,acl,less"
)
# Part of the image recipe: changing any of these rebuilds the image.
IMAGE_SETUP = """
set -e
rm -f /etc/ssh/ssh_host_*
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
echo 'PermitRootLogin prohibit-password' > /etc/ssh/sshd_config.d/dflash-lab.conf
echo 'PasswordAuthentication no' >> /etc/ssh/sshd_config.d/dflash-lab.conf
systemctl mask getty@tty1.service console-getty.service systemd-logind.service apt-daily.timer apt-daily-upgrade.timer
ln -sf /lib/systemd/systemd /sbin/init
"""
IMAGE_RECIPE_VERSION = 1

# The reference host's known-good environment, in the incident's layout.
REFERENCE_VENV = "/root/venv_sglang211"
REFERENCE_SET = (
    "torch==2.11.0+cu130", "sglang-kernel==0.4.2",
    "flashinfer-python==0.6.8.post1", "flashinfer-cubin==0.6.8.post1",
)
PROVISIONED = "/etc/dflash-lab-provisioned"  # written last: a host without it is re-provisioned
# The reference venv's seed: a digest of the fixture DFlash tree, REFERENCE_SET and the fixture wheels'
# manifest. `up` seeds the reference host again when the fixtures changed since (the tree is what
# stage_artifacts captures; a wheel's requirements decide what the venv holds).
SEEDED = "/etc/dflash-lab-seeded"
MODELS = {"Qwen3-8B": "Qwen3ForCausalLM", "Qwen3-8B-DFlash-b16": "DFlashDraftModel"}


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    gpu_config: str            # file under tools/lab/gpus/
    gpus: int
    group: str                 # dflash_reference or dflash_targets
    stopgap: bool = False      # the incident's stop-gap server on GPU 0, port 30000
    reference: bool = False    # seeded with the known-good venv
    network: str = NETWORK     # OFFLINE_NETWORK: no route even to the lab index

    @property
    def container(self) -> str:
        return PREFIX + self.name

    @property
    def mac(self) -> str:
        """Fixed per address, so a recreated or restarted host is reachable at once (no stale ARP entry
        on the controller pointing at the old container's address)."""
        return "02:dc:" + ":".join(f"{int(o):02x}" for o in self.address.split("."))


def hosts(targets: int = 0, offline: int = 0) -> list[Host]:
    """ct129 (reference), ct200 (target), `targets` more fresh targets ct201…, and `offline`
    fresh targets ct250… on the offline network."""
    out = [
        Host("ct129", "10.89.64.129", "ct129.conf", 2, "dflash_reference", reference=True),
        Host("ct200", "10.89.64.200", "ct200.conf", 8, "dflash_targets", stopgap=True),
    ]
    for i in range(targets):
        n = 201 + i
        out.append(Host(f"ct{n}", f"10.89.64.{n}", "target.conf", 4, "dflash_targets"))
    for i in range(offline):
        n = 250 + i
        out.append(Host(f"ct{n}", f"10.89.65.{n}", "target.conf", 4, "dflash_targets", network=OFFLINE_NETWORK))
    return out


# -- small helpers ----------------------------------------------------------------------------

def log(msg: str) -> None:
    print(f"[lab] {msg}", flush=True)


class LabError(RuntimeError):
    pass


def run(cmd, check=True, capture=True, input=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=capture, text=True, input=input, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): "
                       f"{(proc.stderr or proc.stdout or '').strip()[-2000:]}")
    return proc


def podman(*args, **kw) -> subprocess.CompletedProcess:
    return run(["podman", *args], **kw)


def hexec(host: Host, script: str, check=True, timeout=600) -> subprocess.CompletedProcess:
    """Run a shell script inside a lab host (as root, through podman, not SSH)."""
    return podman("exec", "-i", host.container, "bash", "-euo", "pipefail", "-s",
                  input=script, check=check, timeout=timeout)


# -- host quirks (applied only where detected) -------------------------------------------------

def ensure_tools() -> None:
    missing = [t for t in ("podman", "debootstrap") if shutil.which(t) is None]
    if not missing:
        return
    log(f"installing {' '.join(missing)} from Debian's packages")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env, timeout=900)
    run(["apt-get", "install", "-y", "-qq", *missing], env=env, timeout=900)


def _cap_effective() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


CAP_SYS_RESOURCE = 24
CONTAINERS_CONF = Path("/etc/containers/containers.conf")


def needs_ulimit_quirk() -> bool:
    """crun sets default rlimits; without CAP_SYS_RESOURCE setrlimit fails (EPERM)."""
    return not (_cap_effective() >> CAP_SYS_RESOURCE) & 1


def ulimit_quirk_applied() -> bool:
    if not CONTAINERS_CONF.exists():
        return False
    return any(line.strip().replace(" ", "") == "default_ulimits=[]"
               for line in CONTAINERS_CONF.read_text().splitlines())


def needs_hugetlb_quirk() -> bool:
    """hugetlb on the cgroup2 mount while the rest is v1: crun refuses hybrid mode."""
    unified = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    if not unified.exists():
        return False
    if "hugetlb" not in unified.read_text().split():
        return False
    return not Path("/sys/fs/cgroup/hugetlb/tasks").exists()


def apply_quirks() -> list[str]:
    applied = []
    if needs_ulimit_quirk() and not ulimit_quirk_applied():
        CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
        text = CONTAINERS_CONF.read_text() if CONTAINERS_CONF.exists() else ""
        if "[containers]" in text:
            text = text.replace("[containers]", "[containers]\ndefault_ulimits = []", 1)
        else:
            text += "\n[containers]\ndefault_ulimits = []\n"
        CONTAINERS_CONF.write_text(text)
        applied.append("default_ulimits = [] (no CAP_SYS_RESOURCE)")
    if needs_hugetlb_quirk():
        Path("/sys/fs/cgroup/hugetlb").mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "cgroup", "-o", "hugetlb", "cgroup", "/sys/fs/cgroup/hugetlb"])
        applied.append("hugetlb bound to a v1 hierarchy (hybrid cgroups)")
    for a in applied:
        log(f"host quirk applied: {a}")
    return applied


# -- base image ---------------------------------------------------------------------------------

def apt_mirror() -> str:
    """The Debian mirror apt already uses (deb822 or one-line sources); the lab names none itself."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")) + [Path("/etc/apt/sources.list")]:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            if line.startswith("URIs:"):
                for uri in words[1:]:
                    if uri.rstrip("/").endswith("/debian"):
                        return uri
            elif line.startswith("deb ") and len(words) > 1:
                uri = next((w for w in words[1:] if "://" in w), "")
                if uri.rstrip("/").endswith("/debian"):
                    return uri
    raise LabError("no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources: "
                   "the lab's base image is debootstrapped from the mirror apt uses; configure apt first")


def image_tag() -> str:
    recipe = json.dumps([IMAGE_RECIPE_VERSION, SUITE, PACKAGES, IMAGE_SETUP], sort_keys=True)
    return f"localhost/dflash-lab:{SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def image_exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def ensure_image() -> str:
    tag = image_tag()
    if image_exists(tag):
        log(f"base image {tag} cached")
        return tag
    t0 = time.monotonic()
    mirror = apt_mirror()
    log(f"building base image {tag}: debootstrap {SUITE} from {mirror} (about a minute)")
    with tempfile.TemporaryDirectory(prefix="dflash-lab-rootfs.") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(rootfs), mirror],
            timeout=1800)
        run(["chroot", str(rootfs), "bash", "-c", IMAGE_SETUP])
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["podman", "import", "--change", "CMD=/lib/systemd/systemd",
                              "--change", f"LABEL={LABEL}=base", "-", tag],
                             stdin=tar.stdout, capture_output=True, text=True)
        tar.stdout.close()
        if tar.wait() != 0 or imp.returncode != 0:
            raise LabError(f"podman import failed: {imp.stderr.strip()}")
    # Older recipes' images are dropped: the cache holds one image.
    for line in podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=False).stdout.split():
        if line.startswith("localhost/dflash-lab:") and line != tag:
            podman("rmi", line, check=False)
    log(f"base image built in {time.monotonic() - t0:.0f}s")
    return tag


# -- network --------------------------------------------------------------------------------------

def ensure_network(name: str = NETWORK) -> None:
    subnet, gateway = NETWORKS[name]
    if podman("network", "exists", name, check=False).returncode == 0:
        info = json.loads(podman("network", "inspect", name).stdout)[0]
        subnets = [s.get("subnet") for s in info.get("subnets", [])]
        if subnet in subnets:
            return
        raise LabError(f"podman network {name} exists with subnets {subnets}, not {subnet}: "
                       f"remove it (podman network rm {name}) and run lab-up again")
    # --internal: no default route and no NAT, the containers reach the gateway address only.
    podman("network", "create", "--internal", "--subnet", subnet, "--gateway", gateway,
           "--label", f"{LABEL}=network", name)
    log(f"network {name} {subnet} (internal: no route out)")


def ensure_blackhole_routes() -> None:
    """A blackhole route (low priority) for each lab subnet: while the lab's bridge is down, a
    connection to a lab address fails here at once instead of leaving through the default route
    to a network the lab does not own. The bridge's own route, when it exists, wins."""
    for subnet, _ in NETWORKS.values():
        have = run(["ip", "route", "show", "type", "blackhole", subnet], check=False).stdout
        if subnet not in have:
            run(["ip", "route", "add", "blackhole", subnet, "metric", "4242"], check=False)


# -- package index on the gateway -------------------------------------------------------------------

INDEX_PID = STATE / "index.pid"
INDEX_DELAY = STATE / "index-delay"  # seconds each wheel download waits (tests widen a build window)


def index_running() -> bool:
    try:
        pid = int(INDEX_PID.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    try:
        with socket.create_connection((GATEWAY, INDEX_PORT), timeout=2):
            return True
    except OSError:
        return False


def ensure_index() -> str:
    url = f"http://{GATEWAY}:{INDEX_PORT}/simple"
    if not (FIXTURES / "simple" / "index.html").is_file():
        raise LabError(f"{FIXTURES}/simple is missing: run `make fixtures` first")
    if index_running():
        return url
    stop_foreign_index()
    try:
        with socket.create_connection((GATEWAY, INDEX_PORT), timeout=2):
            raise LabError(f"{GATEWAY}:{INDEX_PORT} is already served by a process that is not a lab index: "
                           "stop it and run lab-up again")
    except OSError:
        pass
    STATE.mkdir(parents=True, exist_ok=True)
    logf = open(STATE / "index.log", "ab")
    proc = subprocess.Popen([sys.executable, str(HERE / "index_server.py"), "--bind", GATEWAY, "--port",
                             str(INDEX_PORT), "--directory", str(FIXTURES), "--delay-file", str(INDEX_DELAY)],
                            stdout=logf, stderr=logf,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    INDEX_PID.write_text(str(proc.pid))
    for _ in range(50):
        if index_running():
            log(f"package index {url} (serving {FIXTURES})")
            return url
        time.sleep(0.1)
    raise LabError(f"the package index did not start on {GATEWAY}:{INDEX_PORT} (see {STATE}/index.log)")


def stop_foreign_index() -> None:
    """Another checkout's lab index on our address and port (its lab is being replaced by this one,
    as its hosts are): stop it. Only processes running this same tool are touched."""
    needle = ["--bind", GATEWAY, "--port", str(INDEX_PORT)]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if any(a.endswith("tools/lab/index_server.py") for a in args) and \
                all(n in args for n in needle) and f"{FIXTURES}" not in args:
            log(f"stopping another checkout's lab index (pid {proc.name})")
            try:
                os.kill(int(proc.name), signal.SIGTERM)
            except OSError:
                pass
            time.sleep(0.5)


def stop_index() -> None:
    try:
        pid = int(INDEX_PID.read_text())
        os.killpg(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass
    INDEX_PID.unlink(missing_ok=True)


# -- ssh -------------------------------------------------------------------------------------------

def ensure_key() -> Path:
    key = SSH_DIR / "id_ed25519"
    if not key.exists():
        SSH_DIR.mkdir(parents=True, exist_ok=True)
        os.chmod(SSH_DIR, 0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dflash-lab", "-f", str(key)])
    return key


# -- hosts ------------------------------------------------------------------------------------------

def container_state(host: Host) -> str:
    proc = podman("inspect", "--format", "{{.State.Status}}", host.container, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else "absent"


def provisioned(host: Host) -> bool:
    return podman("exec", host.container, "test", "-f", PROVISIONED, check=False).returncode == 0


def start_host(host: Host, image: str) -> bool:
    """Create (or start) the container; True when it was created now."""
    state = container_state(host)
    if state != "absent" and container_checkout(host) != str(REPO):
        # Made by another checkout (its key, its fixtures): this checkout makes its own.
        log(f"{host.name}: container belongs to another checkout, recreating it")
        podman("rm", "-f", "-t", "0", host.container)
        state = "absent"
    if state == "running":
        return False
    if state != "absent":
        podman("start", host.container)
        wait_systemd(host)
        wait_ssh(host)
        return False
    devices = ["--device", "/dev/null:/dev/nvidiactl"]
    for i in range(host.gpus):
        devices += ["--device", f"/dev/null:/dev/nvidia{i}"]
    # CAP_SYS_ADMIN: systemd needs mount namespaces for a unit's sandboxing (ProtectSystem=,
    # ReadWritePaths=, PrivateDevices=, PrivateTmp=, ...). Without it, systemd in a container
    # starts the unit with none of them ("assuming containerized execution"), and a hardening
    # setting that breaks the server on a real host would pass in the lab.
    podman("run", "-d", "--name", host.container, "--hostname", host.name,
           "--network", f"{host.network}:ip={host.address},mac={host.mac}", "--systemd=always",
           "--cap-add", "SYS_ADMIN",
           "--label", f"{LABEL}=host", "--label", f"{LABEL}.name={host.name}",
           "--label", f"{LABEL}.checkout={REPO}",
           *devices, image, "/lib/systemd/systemd")
    wait_systemd(host)
    return True


def wait_ssh(host: Host, timeout: float = 60) -> None:
    """Until sshd answers on the host's address from here (the controller's side of the bridge)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host.address, 22), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise LabError(f"{host.name}: sshd does not answer on {host.address}:22")


def container_checkout(host: Host) -> str:
    fmt = "{{index .Config.Labels \"" + LABEL + ".checkout\"}}"
    return podman("inspect", "--format", fmt, host.container, check=False).stdout.strip()


def wait_systemd(host: Host, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = podman("exec", host.container, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.3)
    raise LabError(f"{host.name}: systemd did not finish booting (is-system-running: {state or 'no answer'})")


def provision(host: Host, key: Path, index_url: str) -> None:
    """Everything a fresh container needs to be a lab host. Runs once, right after creation."""
    t0 = time.monotonic()
    # sshd: per-host keys, our public key for root.
    hexec(host, f"""
ssh-keygen -A -q
install -d -m 0700 /root/.ssh
printf '%s\\n' '{key.with_suffix('.pub').read_text().strip()}' > /root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys
systemctl enable --now ssh.service >/dev/null 2>&1 || systemctl restart ssh.service
""")
    # The fixture NVIDIA driver: visibly a fixture, installed only here.
    driver = FIXTURES / "driver"
    hexec(host, "install -d /opt/dflash-fixture-driver")
    podman("cp", str(driver / "lib"), f"{host.container}:/opt/dflash-fixture-driver/")
    podman("cp", str(driver / "bin"), f"{host.container}:/opt/dflash-fixture-driver/")
    podman("cp", str(HERE / "gpus" / host.gpu_config), f"{host.container}:/tmp/gpus.conf")
    hexec(host, """
install -d /etc/dflash-fixture
install -m 0644 /tmp/gpus.conf /etc/dflash-fixture/gpus.conf && rm /tmp/gpus.conf
echo /opt/dflash-fixture-driver/lib > /etc/ld.so.conf.d/dflash-fixture-driver.conf
ldconfig
ln -sfn /opt/dflash-fixture-driver/bin/nvidia-smi /usr/bin/nvidia-smi
echo 'd /run/dflash-fixture 1777 root root -' > /etc/tmpfiles.d/dflash-fixture.conf
systemd-tmpfiles --create /etc/tmpfiles.d/dflash-fixture.conf
""")
    # Model directories (config.json only: the fixture server loads no weights).
    script = ["install -d /srv/models"]
    for name, arch in MODELS.items():
        script.append(f"install -d /srv/models/{name}")
        script.append(f"echo '{{\"architectures\": [\"{arch}\"]}}' > /srv/models/{name}/config.json")
    hexec(host, "\n".join(script))
    if host.stopgap:
        install_stopgap(host)
    if host.reference:
        seed_reference(host, index_url)
    wait_ssh(host)
    hexec(host, f"echo {image_tag()} > {PROVISIONED}")
    log(f"{host.name}: provisioned in {time.monotonic() - t0:.1f}s")


def install_stopgap(host: Host) -> None:
    """The incident's stop-gap server: holds GPU 0 (a CUDA context) and answers on port 30000."""
    podman("cp", str(HERE / "files" / "stopgap.py"), f"{host.container}:/usr/local/lib/ddtree-stopgap.py")
    podman("cp", str(HERE / "files" / "ddtree-stopgap.service"),
           f"{host.container}:/etc/systemd/system/ddtree-stopgap.service")
    hexec(host, """
systemctl daemon-reload
systemctl enable --now ddtree-stopgap.service
for i in $(seq 50); do curl -fsS http://127.0.0.1:30000/health >/dev/null 2>&1 && exit 0; sleep 0.2; done
journalctl -u ddtree-stopgap.service --no-pager | tail -20; exit 1
""")


def push_uv(host: Host) -> None:
    if not UV.exists():
        raise LabError(f"{UV} is missing: run `make setup` first")
    podman("cp", str(UV), f"{host.container}:/usr/local/bin/uv")


def seed_digest() -> str:
    tar = FIXTURES / "dflash-src.tar"
    h = hashlib.sha256(tar.read_bytes() if tar.is_file() else b"")
    h.update(json.dumps(REFERENCE_SET).encode())
    manifest = FIXTURES / "manifest.json"  # the wheels REFERENCE_SET resolves to (and what they require)
    h.update(manifest.read_bytes() if manifest.is_file() else b"")
    return h.hexdigest()[:16]


def seeded(host: Host) -> bool:
    proc = podman("exec", host.container, "cat", SEEDED, check=False)
    return proc.returncode == 0 and proc.stdout.strip() == seed_digest()


def seed_reference(host: Host, index_url: str) -> None:
    """The known-good environment on the reference host, in the incident's layout: a uv venv with
    PyPI-style sglang 0.5.9 whose sglang/ tree was replaced as a whole by the DFlash-capable tree
    (fixture 0.5.11's; the 0.5.9 dist-info stays and no longer describes the code), and the cu130 stack."""
    push_uv(host)
    digest = seed_digest()
    hexec(host, "rm -rf /root/sglang-dflash")
    podman("cp", str(FIXTURES / "dflash-src" / "python" / "sglang"), f"{host.container}:/root/sglang-dflash")
    reqs = " ".join(f"'{r}'" for r in REFERENCE_SET)
    hexec(host, f"""
export UV_CACHE_DIR=/root/.cache/uv UV_LINK_MODE=copy UV_NO_PROGRESS=1
V={REFERENCE_VENV}
uv cache clean --quiet sglang sgl-kernel sglang-kernel
uv venv --quiet --clear --python /usr/bin/python3 $V
uv pip install --quiet --python $V/bin/python --index-url {index_url} --no-deps sglang==0.5.9
SP=$($V/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf $SP/sglang
cp -a /root/sglang-dflash $SP/sglang
uv pip install --quiet --python $V/bin/python --index-url {index_url} {reqs}
rm -rf /root/sglang-dflash
echo {digest} > {SEEDED}
""", timeout=900)


# -- inventory -----------------------------------------------------------------------------------

def inventory_text(all_hosts: list[Host]) -> str:
    rel = "{{ inventory_dir }}/../build/lab/ssh"
    lines = [
        "# The lab's hosts: written by `make lab-up` (tools/lab/lab.py); every address is inside",
        f"# the lab's own podman network {SUBNET} (gateway {GATEWAY} is this machine).",
        "# The key and known_hosts are generated by the lab under build/lab/ssh (never committed).",
        "lab:",
        "  vars:",
        "    ansible_user: root",
        "    ansible_python_interpreter: /usr/bin/python3",
        f"    ansible_ssh_private_key_file: \"{rel}/id_ed25519\"",
        f"    ansible_ssh_common_args: \"-o UserKnownHostsFile={rel}/known_hosts -o StrictHostKeyChecking=yes\"",
        f"    lab_index_url: http://{GATEWAY}:{INDEX_PORT}/simple",
        f"    lab_wheelhouse_url: http://{GATEWAY}:{INDEX_PORT}/wheelhouse/",
        "    lab_wheelhouse_dir: \"{{ inventory_dir }}/../build/fixtures/wheelhouse\"",
        "    # Controller-side inputs: staged artifacts under <dir>/artifacts, and the uv pushed to hosts.",
        "    dflash_controller_dir: \"{{ inventory_dir }}/../build\"",
        "    dflash_uv_path: \"{{ inventory_dir }}/../.tools/uv/bin/uv\"",
        "  children:",
    ]
    offline = [h for h in all_hosts if h.network == OFFLINE_NETWORK]
    if offline:
        lines.append("    lab_offline:")
        lines.append("      hosts:")
        lines += [f"        {h.name}:" for h in offline]
    for group in ("dflash_reference", "dflash_targets"):
        lines.append(f"    {group}:")
        lines.append("      hosts:")
        for h in all_hosts:
            if h.group == group:
                lines.append(f"        {h.name}:")
                lines.append(f"          ansible_host: {h.address}")
                if h.reference:
                    lines.append(f"          dflash_reference_venv: {REFERENCE_VENV}")
    return "\n".join(lines) + "\n"


def write_inventory(all_hosts: list[Host]) -> None:
    text = inventory_text(all_hosts)
    if not INVENTORY.exists() or INVENTORY.read_text() != text:
        INVENTORY.write_text(text)
        log(f"wrote {INVENTORY.relative_to(REPO)} ({len(all_hosts)} hosts)")


USER_KNOWN_HOSTS = Path.home() / ".ssh" / "known_hosts"
KH_BEGIN, KH_END = "# dflash-lab begin (tools/lab/lab.py; removed by lab-down)", "# dflash-lab end"


def write_known_hosts(running: list[Host]) -> None:
    """The lab's host keys, read from the hosts themselves (not trusted on first use).

    OpenSSH reads build/lab/ssh/known_hosts (the inventory's UserKnownHostsFile). The paramiko
    connection reads only ~/.ssh/known_hosts, so the same lines go there too, in a marked block
    that every lab-up rewrites (recreated hosts get new keys) and lab-down removes."""
    lines = []
    for h in running:
        pub = podman("exec", h.container, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        lines.append(f"{h.address} {pub[0]} {pub[1]}")
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    (SSH_DIR / "known_hosts").write_text("\n".join(lines) + "\n")
    _user_known_hosts_block(lines)


def _user_known_hosts_block(lines: list[str]) -> None:
    old = USER_KNOWN_HOSTS.read_text().splitlines() if USER_KNOWN_HOSTS.exists() else []
    kept, inside = [], False
    for line in old:
        if line == KH_BEGIN:
            inside = True
        elif line == KH_END:
            inside = False
        elif not inside:
            kept.append(line)
    if lines:
        kept += [KH_BEGIN, *lines, KH_END]
    if kept == old:
        return
    USER_KNOWN_HOSTS.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = USER_KNOWN_HOSTS.with_name(".known_hosts.dflash-lab")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.chmod(tmp, 0o600)
    os.replace(tmp, USER_KNOWN_HOSTS)


# -- commands ---------------------------------------------------------------------------------------

def lab_hosts_present() -> list[str]:
    out = podman("ps", "-a", "--filter", f"label={LABEL}=host", "--format", "{{.Names}}", check=False).stdout
    return [n for n in out.split() if n.startswith(PREFIX)]


def current_targets() -> int:
    """How many extra targets the running lab has (so a plain `up` keeps them)."""
    names = [n[len(PREFIX):] for n in lab_hosts_present()]
    return len([n for n in names if n not in ("ct129", "ct200") and int(n[2:]) < 250])


def current_offline() -> int:
    names = [n[len(PREFIX):] for n in lab_hosts_present()]
    return len([n for n in names if int(n[2:]) >= 250])


def current_hosts() -> list[Host]:
    return hosts(current_targets(), current_offline())


def cmd_up(args) -> int:
    t0 = time.monotonic()
    ensure_blackhole_routes()
    ensure_tools()
    apply_quirks()
    image = ensure_image()
    targets = args.targets if args.targets is not None else current_targets()
    offline = args.offline if args.offline is not None else current_offline()
    all_hosts = hosts(targets, offline)
    for net in sorted({h.network for h in all_hosts}):
        ensure_network(net)
    key = ensure_key()
    wanted = {h.container for h in all_hosts}
    for name in lab_hosts_present():
        if name not in wanted:
            log(f"removing {name} (not in LAB_TARGETS={targets} LAB_OFFLINE={offline})")
            podman("rm", "-f", "-t", "0", name)
    for h in all_hosts:
        if start_host(h, image):
            log(f"{h.name}: container started ({h.address})")
    # The gateway address exists once the network's bridge does, i.e. after the first container.
    index_url = ensure_index()
    for h in all_hosts:
        if not provisioned(h):
            provision(h, key, index_url)
        elif h.reference and not seeded(h):
            log(f"{h.name}: the fixture DFlash tree changed, seeding {REFERENCE_VENV} again")
            seed_reference(h, index_url)
    write_known_hosts(all_hosts)
    write_inventory(all_hosts)
    log(f"lab up: {', '.join(h.name for h in all_hosts)} in {time.monotonic() - t0:.1f}s")
    return 0


def cmd_down(args) -> int:
    ensure_blackhole_routes()  # kept after down: stray connections to lab addresses stay on this machine
    for name in lab_hosts_present():
        podman("rm", "-f", "-t", "0", name)
        log(f"removed {name}")
    for net in NETWORKS:
        if podman("network", "exists", net, check=False).returncode == 0:
            podman("network", "rm", net)
            log(f"removed network {net}")
    stop_index()
    _user_known_hosts_block([])
    shutil.rmtree(STATE, ignore_errors=True)
    write_inventory(hosts(0))
    return 0


def ssh_ok(host: Host) -> bool:
    key, kh = SSH_DIR / "id_ed25519", SSH_DIR / "known_hosts"
    proc = run(["ssh", "-i", str(key), "-o", f"UserKnownHostsFile={kh}", "-o", "StrictHostKeyChecking=yes",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", f"root@{host.address}", "true"],
               check=False, timeout=30)
    return proc.returncode == 0


def cmd_status(args) -> int:
    present = lab_hosts_present()
    if not present:
        print("lab: down")
        return 1
    ok = True
    print(f"network {NETWORK} {SUBNET}; index "
          f"{'up' if index_running() else 'DOWN'} http://{GATEWAY}:{INDEX_PORT}/simple; image {image_tag()}")
    ok &= index_running()
    for h in current_hosts():
        state = container_state(h)
        sysd = ssh = "-"
        if state == "running":
            sysd = podman("exec", h.container, "systemctl", "is-system-running", check=False).stdout.strip()
            ssh = "ok" if ssh_ok(h) else "FAILED"
        good = state == "running" and sysd in ("running", "degraded") and ssh == "ok"
        ok &= good
        print(f"{h.name:6} {h.address:14} container={state:8} systemd={sysd:9} ssh={ssh}")
    return 0 if ok else 1


def find_host(name: str) -> Host:
    for h in current_hosts():
        if h.name == name:
            return h
    raise LabError(f"no lab host named {name!r}")


def close_ssh_masters() -> None:
    """Close Ansible's OpenSSH ControlPersist masters: one to a host that was killed or recreated
    would hang the next connection (and keep the old session's environment)."""
    cp_dir = Path.home() / ".ansible" / "cp"
    for sock in cp_dir.glob("*") if cp_dir.is_dir() else []:
        run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "lab"], check=False, timeout=10)


def cmd_reset(args) -> int:
    """Recreate one host from the image: an empty machine, provisioned as lab-up does."""
    h = find_host(args.host)
    podman("rm", "-f", "-t", "0", h.container, check=False)
    close_ssh_masters()
    image = ensure_image()
    start_host(h, image)
    provision(h, ensure_key(), ensure_index())
    write_known_hosts([x for x in current_hosts() if container_state(x) == "running"])
    return 0


def cmd_power(args) -> int:
    h = find_host(args.host)
    close_ssh_masters()
    if args.cmd == "stop":
        podman("stop", "-t", "10", h.container)
    elif args.cmd == "kill":
        podman("kill", h.container)
    else:
        podman("start", h.container)
        wait_systemd(h)
        wait_ssh(h)
    log(f"{h.name}: {args.cmd}")
    return 0


def cmd_index_delay(args) -> int:
    """Every wheel download waits this long (0 removes the delay): a build becomes a window."""
    if args.seconds > 0:
        STATE.mkdir(parents=True, exist_ok=True)
        INDEX_DELAY.write_text(f"{args.seconds}\n")
    else:
        INDEX_DELAY.unlink(missing_ok=True)
    log(f"index delay per wheel: {args.seconds}s")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--targets", type=int, default=None,
                    help="extra fresh targets ct201… (default: LAB_TARGETS, else what is running)")
    up.add_argument("--offline", type=int, default=None,
                    help="fresh targets ct250… on the offline network (default: LAB_OFFLINE, else what is running)")
    sub.add_parser("down")
    sub.add_parser("status")
    for name in ("reset", "stop", "start", "kill"):
        sp = sub.add_parser(name)
        sp.add_argument("host")
    sp = sub.add_parser("index-delay")
    sp.add_argument("seconds", type=float)
    args = p.parse_args(argv)
    if args.cmd == "up" and args.targets is None and os.environ.get("LAB_TARGETS"):
        args.targets = int(os.environ["LAB_TARGETS"])
    if args.cmd == "up" and args.offline is None and os.environ.get("LAB_OFFLINE"):
        args.offline = int(os.environ["LAB_OFFLINE"])
    if os.geteuid() != 0:
        print("lab: needs root (podman with systemd containers, debootstrap)", file=sys.stderr)
        return 2
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status, "reset": cmd_reset,
                "stop": cmd_power, "start": cmd_power, "kill": cmd_power,
                "index-delay": cmd_index_delay}[args.cmd](args)
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
