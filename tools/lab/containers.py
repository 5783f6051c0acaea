"""One host's container: how it is created or started, waited for (systemd, sshd) and provisioned
once (sshd key, fixture driver, model directories, stop-gap server, reference seeding)."""
from __future__ import annotations

import socket
import time
from pathlib import Path

from common import FIXTURES, HERE, LABEL, REPO, LabError, log, podman
from hosts import Host, hexec
from image import image_tag
from reference import seed_reference

PROVISIONED = "/etc/dflash-lab-provisioned"  # written last: a host without it is re-provisioned
MODELS = {"Qwen3-8B": "Qwen3ForCausalLM", "Qwen3-8B-DFlash-b16": "DFlashDraftModel"}


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
