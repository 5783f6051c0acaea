"""The reference host's known-good venv: what it holds, how it is seeded (uv pushed from the
controller) and when it is seeded again (the digest of the fixtures it was made from)."""
from __future__ import annotations

import hashlib
import json

from common import FIXTURES, UV, LabError, podman
from hosts import Host, hexec

# The reference host's known-good environment, in the incident's layout.
REFERENCE_VENV = "/root/venv_sglang211"
REFERENCE_SET = (
    "torch==2.11.0+cu130", "sglang-kernel==0.4.2",
    "flashinfer-python==0.6.8.post1", "flashinfer-cubin==0.6.8.post1",
)
# The reference venv's seed: a digest of the fixture DFlash tree, REFERENCE_SET and the fixture wheels'
# manifest. `up` seeds the reference host again when the fixtures changed since (the tree is what
# stage_artifacts captures; a wheel's requirements decide what the venv holds).
SEEDED = "/etc/dflash-lab-seeded"


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
