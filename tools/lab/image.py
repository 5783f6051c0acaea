"""The base image: its recipe (suite, packages, setup script), its tag (the recipe's hash) and how
it is built when not cached (debootstrap from the mirror apt uses, imported into podman)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

from common import LABEL, LabError, log, podman, run

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
