"""The README's "Deploying to production" section, followed step by step against the lab.

Every command in that section's ```sh blocks is run as written, in order, by an operator with
no checkout: a fresh HOME, the collection installed from its tarball, an inventory copied from
production.example.yml. The one step the README leaves to a person, editing the inventory, is
done here the way the README says (addresses, connection, package index, controller paths,
the instance's API key from the vault), pointing at the lab instead of 192.0.2.x. The reference host's venv
is at a path of the operator's own, set only as that host's variable, as the example inventory shows.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import REPO, VENV_BIN, collection_check, lab

API_KEY = "sk-lab-operator-test"
# The operator's reference venv is not where the defaults look (issue 44's B-1: it is read from the reference
# host's own variables): ct129's is moved there for this test, and the inventory names it as ct129's host var.
REFERENCE_VENV = "/root/venv_sglang211"
OPERATOR_VENV = "/srv/venvs/sglang-reference"


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Deploying to production", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def edit_inventory(path, controller_dir):
    """What the README's step 2 asks of the operator, for the lab's hosts."""
    inv = yaml.safe_load(path.read_text())
    lab_vars = yaml.safe_load(lab.INVENTORY.read_text())["lab"]["vars"]
    ssh = REPO / "build" / "lab" / "ssh"
    inv["all"]["vars"].update({
        "ansible_ssh_private_key_file": str(ssh / "id_ed25519"),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={ssh / 'known_hosts'} -o StrictHostKeyChecking=yes",
        "ansible_python_interpreter": "/usr/bin/python3",
        "dflash_uv_path": str(REPO / ".tools" / "uv" / "bin" / "uv"),
        "dflash_controller_dir": str(controller_dir),
    })
    children = inv["all"]["children"]
    for group in children.values():
        for name, hv in group["hosts"].items():
            hv["ansible_host"] = next(h.address for h in lab.hosts() if h.name == name)
    children["dflash_reference"]["hosts"]["ct129"]["dflash_reference_venv"] = OPERATOR_VENV
    tv = children["dflash_targets"]["vars"]
    tv.update({"sglang_venv_index_url": lab_vars["lab_index_url"], "sglang_venv_extra_index_urls": [],
               "sglang_service_readiness_timeout": 60, "host_preflight_min_free_gb": 1,
               # the lab's fixtures share the real names and versions (sglang 0.5.11) but not their bytes:
               # the collection's hashes of the real files would refuse them (as in inventory/group_vars/lab.yml)
               "sglang_venv_default_stack_hashes": False})
    # The fixture server's latencies are the machine's load: the performance gate's limits as the lab's
    # inventory sets them (the latency limits out of reach, the acceptance limit the production one).
    lab_group_vars = yaml.safe_load((REPO / "inventory" / "group_vars" / "lab.yml").read_text())
    tv.update({k: v for k, v in lab_group_vars.items() if k.startswith("sglang_service_perf_gate_")})
    for inst in tv["sglang_service_instances"]:
        inst["extra_args"] = ["--disable-cuda-graph"]
        inst["api_key"] = "{{ vault_sglang_api_key }}"
    path.write_text(yaml.safe_dump(inv, sort_keys=False))


def models(port: int, key: str | None):
    req = urllib.request.Request(f"http://10.89.64.200:{port}/v1/models")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return [m["id"] for m in json.load(resp)["data"]]


def current_release() -> str:
    return lab.hexec(next(h for h in lab.hosts() if h.name == "ct200"),
                     "readlink /opt/dflash/instances/qwen3-8b/current").stdout.strip()


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    # A short HOME: ssh's ControlPath for the bundle's transfer (~/.ansible/cp/<40 hex>-transfer, and the
    # master's temporary name beside it) must fit a Unix socket's 108 bytes, which pytest's own temporary
    # directories (/tmp/pytest-of-root/pytest-283/home0) leave no room for.
    home = Path(tempfile.mkdtemp(prefix="op-", dir="/tmp"))
    work = tmp_path_factory.mktemp("operator")
    env = {"HOME": str(home), "PATH": f"{VENV_BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "SGLANG_API_KEY": API_KEY, "ANSIBLE_NOCOLOR": "1"}
    (home / ".dflash-vault-pass").write_text("lab vault password\n")
    os.chmod(home / ".dflash-vault-pass", 0o600)
    collection_check.build(work)  # the tarball the README's first command installs
    ct129 = next(h for h in lab.hosts() if h.name == "ct129")
    lab.hexec(ct129, f"mkdir -p {os.path.dirname(OPERATOR_VENV)} && mv {REFERENCE_VENV} {OPERATOR_VENV}")

    def run(line: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"$ {line}\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        return proc
    yield work, run
    shutil.rmtree(home, ignore_errors=True)
    lab.hexec(ct129, f"if [ -d {OPERATOR_VENV} ]; then mv {OPERATOR_VENV} {REFERENCE_VENV}; fi; "
              f"rmdir {os.path.dirname(OPERATOR_VENV)} 2>/dev/null || true", check=False)


def test_the_readme_operator_path(operator):
    work, run = operator
    commands = readme_commands()
    kinds = [c.split()[0] for c in commands]
    assert kinds.count("ansible-playbook") == 4, commands  # stage, deploy, audit, rollback
    playbooks = iter(c for c in commands if c.startswith("ansible-playbook"))
    for line in commands:
        if line.startswith("ansible-playbook"):
            break
        run(line)
        if line.startswith("cp "):
            edit_inventory(work / "inventory" / "production.yml", work / "dflash")

    stage = run(next(playbooks))
    assert (work / "dflash" / "artifacts" / "cuda-cu130.tar").is_file(), stage.stdout[-2000:]
    run(next(playbooks))                                   # deploy
    assert models(30001, API_KEY) == ["qwen3-8b-dflash"]
    with pytest.raises(urllib.error.HTTPError):           # the key is required
        models(30001, None)
    first = current_release()
    audit = run(next(playbooks))
    assert f"ct129:{OPERATOR_VENV}" in audit.stdout and "ct200:/opt/dflash/instances/qwen3-8b/current" \
        in audit.stdout

    # A later release (the overlay path, with the staged DFlash-capable tree changed), so that there is a
    # previous one to go back to.
    newer = work / "dflash-newer"
    assert not (work / "dflash" / "artifacts" / "dflash-src").exists()  # upstream (the default) captures no tree
    stage_line = next(c for c in commands if "stage_artifacts" in c)
    run(f"{stage_line} -e dflash_source=overlay -e stage_artifacts_force=false")
    run(f"cp -r dflash/artifacts/dflash-src {newer} && echo '# newer' >> "
        f"{newer}/python/sglang/srt/speculative/dflash_utils.py")
    deploy_line = next(c for c in commands if "deploy_dflash" in c)
    # At -vvv, with the host's process list read all along (readiness, restart, the new
    # server): the key shows in no output and on no command line.
    with CommandLines() as seen:
        verbose = run(f"{deploy_line} -e dflash_source=overlay -e dflash_overlay_source_dir={newer} -vvv")
    assert current_release() != first
    assert "instance_ready.py" in verbose.stdout                # the readiness module ran (its file was printed)
    assert API_KEY not in verbose.stdout + verbose.stderr
    assert seen.samples > 10 and any("sglang.launch_server" in line for line in seen.lines), seen.samples
    assert not [line for line in seen.lines if API_KEY in line]

    run(next(playbooks))                                   # rollback
    assert current_release() == first
    assert models(30001, API_KEY) == ["qwen3-8b-dflash"]

    # What a dry run would change, with diffs: the release and the files, never the key.
    dry = run(f"{deploy_line} -e dflash_overlay_source_dir={newer} --check --diff")
    assert "PLAY RECAP" in dry.stdout and API_KEY not in dry.stdout + dry.stderr


class CommandLines:
    """Every command line on ct200 while the block runs, read through podman (not SSH) in a
    loop: the distinct lines seen, and how many times the process list was read."""

    def __init__(self):
        import threading
        self.lines: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._host = next(h for h in lab.hosts() if h.name == "ct200")

    def _watch(self):
        while not self._stop.is_set():
            out = lab.hexec(self._host, "ps -eww -o args=", check=False, timeout=30).stdout
            self.lines.update(out.splitlines())
            self.samples += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=60)
