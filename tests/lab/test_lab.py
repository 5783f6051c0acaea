"""The lab behaves like the incident's machines, as far as a machine without a GPU can."""
from __future__ import annotations

import ipaddress
import re

import pytest
from ansible.release import __version__ as ANSIBLE_CORE_VERSION
from conftest import adhoc, lab, shell

ANSIBLE_CORE = tuple(int(part) for part in ANSIBLE_CORE_VERSION.split(".")[:2])

LAB_NETS = [ipaddress.ip_network(subnet) for subnet, _ in lab.NETWORKS.values()]


def gpu_config(host) -> dict[int, dict]:
    gpus: dict[int, dict] = {}
    for line in (lab.HERE / "gpus" / host.gpu_config).read_text().splitlines():
        m = re.match(r"gpu\.(\d+)\.(\w+)=(.*)", line.strip())
        if m:
            gpus.setdefault(int(m[1]), {})[m[2]] = m[3]
    return gpus


@pytest.mark.parametrize("connection", ["ssh", "paramiko"])
def test_every_host_answers_ping(connection, lab_hosts):
    if connection == "paramiko" and ANSIBLE_CORE >= (2, 21):
        pytest.skip("ansible-core 2.21 no longer ships the paramiko_ssh connection")
    results = adhoc("all", "ansible.builtin.ping", connection=connection)
    assert sorted(results) == sorted(h.name for h in lab_hosts)
    for host, res in results.items():
        assert res.get("ping") == "pong", (host, res)


def test_systemd_is_pid_1_and_running(lab_hosts):
    for h in lab_hosts:
        res = shell(h.name, "cat /proc/1/comm; systemctl is-system-running")
        assert res["stdout"].split() == ["systemd", "running"], (h.name, res)


def test_no_cuda_toolkit_on_the_hosts(lab_hosts):
    for h in lab_hosts:
        res = shell(h.name, "ldconfig -p | grep -c 'libcudart\\|libcublas' || true; command -v nvcc || true")
        assert res["stdout"].strip() == "0", (h.name, res["stdout"])


def test_nvidia_smi_matches_each_hosts_config(lab_hosts):
    for h in lab_hosts:
        gpus = gpu_config(h)
        res = shell(h.name, "nvidia-smi --query-gpu=index,name,compute_cap,memory.total,uuid "
                            "--format=csv,noheader,nounits; echo rc=$?")
        dead = sorted(i for i, g in gpus.items() if g.get("fault") == "dead")
        rows = [line.split(", ") for line in res["stdout"].splitlines() if not line.startswith("rc=")]
        listed = {int(r[0]): r for r in rows}
        assert sorted(listed) == sorted(set(gpus) - set(dead)), (h.name, res)
        for i, row in listed.items():
            assert row[1:] == [gpus[i]["name"], gpus[i]["cc"], gpus[i]["memory_mib"], gpus[i]["uuid"]]
        if dead:  # the real driver's answer for a GPU that fell off: listed as unreachable, exit 255
            assert "rc=255" in res["stdout"] and "Unable to determine the device handle" in res["stderr"]
        else:
            assert "rc=0" in res["stdout"]


def test_the_fixture_driver_is_visibly_a_fixture(lab_hosts):
    for h in lab_hosts:
        res = shell(h.name, "readlink -f $(command -v nvidia-smi); ldconfig -p | grep libcuda.so.1; "
                            "nvidia-smi | head -2")
        assert "/opt/dflash-fixture-driver/bin/nvidia-smi" in res["stdout"]
        assert "/opt/dflash-fixture-driver/lib/libcuda.so.1" in res["stdout"]
        assert "FIXTURE" in res["stdout"]


CTX_PROBE = r"""
import ctypes, json
cuda = ctypes.CDLL("libcuda.so.1")
out = {"init": cuda.cuInit(0)}
n = ctypes.c_int()
cuda.cuDeviceGetCount(ctypes.byref(n))
out["count"] = n.value
ctx = {}
for i in range(n.value):
    dev, c = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuDeviceGet(ctypes.byref(dev), i)
    rc = cuda.cuCtxCreate_v2(ctypes.byref(c), 0, dev)
    ctx[i] = rc
    if rc == 0:
        cuda.cuCtxDestroy_v2(c)
out["ctx"] = ctx
print(json.dumps(out))
"""


def test_libcuda_initialises_the_configured_gpus_and_refuses_the_dead_one(lab_hosts):
    import json
    for h in lab_hosts:
        gpus = gpu_config(h)
        res = shell(h.name, f"python3 - <<'EOF'\n{CTX_PROBE}\nEOF")
        out = json.loads(res["stdout"])
        assert out["init"] == 0 and out["count"] == len(gpus), (h.name, out)
        want = {str(i): (999 if g.get("fault") == "dead" else 0) for i, g in gpus.items()}
        assert out["ctx"] == want, (h.name, out)


def test_pkg_probe_smoke_test_passes_gpu0_and_fails_the_dead_gpu1_on_ct129():
    r = adhoc("ct129", "dflash.deploy.pkg_probe", "venv=/root/venv_sglang211 gpus=true gpu_smoke_test=true")["ct129"]
    assert not r.get("failed"), r
    by_ordinal = {g["cuda_ordinal"]: g for g in r["gpu_smoke_test"]["gpus"]}
    assert by_ordinal[0]["ok"] is True
    assert by_ordinal[1]["ok"] is False and by_ordinal[1]["error"] == "CUDA_ERROR_UNKNOWN"
    assert r["gpu_smoke_test"]["ok"] is False
    assert [g["index"] for g in r["gpus"]] == [0]  # nvidia-smi cannot reach GPU 1 either


def test_device_nodes_present(lab_hosts):
    for h in lab_hosts:
        nodes = " ".join(["/dev/nvidiactl"] + [f"/dev/nvidia{i}" for i in range(h.gpus)])
        res = shell(h.name, f"for n in {nodes}; do test -c $n || echo missing $n; done")
        assert res["stdout"].strip() == "", (h.name, res["stdout"])


def test_ct200_stop_gap_holds_gpu0_and_port_30000():
    res = shell("ct200", "systemctl is-active ddtree-stopgap.service; curl -fsS http://127.0.0.1:30000/health; echo; "
                         "nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader; "
                         "systemctl show -p MainPID --value ddtree-stopgap.service")
    lines = res["stdout"].splitlines()
    assert lines[0] == "active"
    assert '"ddtree-stopgap"' in lines[1]
    pid, uuid = lines[2].split(", ")
    assert uuid == gpu_config(next(h for h in lab.hosts() if h.name == "ct200"))[0]["uuid"]
    assert pid == lines[3]


def test_the_index_is_reachable_and_nothing_else(lab_hosts):
    for h in lab_hosts:
        subnet, _ = lab.NETWORKS[h.network]
        res = shell(h.name, f"(curl -fsS -m 5 {lab.GATEWAY}:{lab.INDEX_PORT}/simple/sglang-kernel/ || echo FAILED) "
                            "| grep -o 'sglang_kernel-[^<\"#]*whl\\|FAILED' | head -1; "
                            "ip -4 route show; ip route get 1.1.1.1 2>&1 || true")
        out = res["stdout"].splitlines()
        if h.network == lab.OFFLINE_NETWORK:  # not even the lab index
            assert out[0] == "FAILED", (h.name, out)
        else:
            assert out[0].startswith("sglang_kernel-0.4.2"), (h.name, out)
        out = out[1:]
        routes = [r.strip() for r in out[:-1] if r.strip()]
        # Only the host's own lab subnet is routed: no default route, no NAT, no packet can leave it.
        assert routes == [f"{subnet} dev eth0 proto kernel scope link src {h.address}"], routes
        assert "unreachable" in out[-1].lower(), out[-1]


def test_ct129_reference_venv_passes_pkg_probe_and_abi_check():
    probe = adhoc("ct129", "dflash.deploy.pkg_probe", "venv=/root/venv_sglang211")["ct129"]
    assert not probe.get("failed"), probe
    dists = {name: d["version"] for name, d in probe["distributions"].items()}
    assert dists["torch"] == "2.11.0+cu130"
    assert dists["sglang-kernel"] == "0.4.2" and "sgl-kernel" not in dists
    assert dists["flashinfer-python"] == "0.6.8.post1"
    assert probe["import_owners"] == {}, probe["import_owners"]  # no import name with two owners
    # The known-good stack knowingly supersedes sglang 0.5.9's pins (torch, sgl-kernel, flashinfer).
    unsatisfied = {u["requirement"] for u in probe["unsatisfied"]}
    assert unsatisfied == {"torch==2.9.1", "sgl-kernel==0.3.21", "flashinfer-python==0.6.3"}, unsatisfied
    dflash = shell("ct129", "ls /root/venv_sglang211/lib/python3.11/site-packages/sglang/srt/speculative/")
    assert "dflash_worker.py" in dflash["stdout"]
    abi = adhoc("ct129", "dflash.deploy.abi_check",
                "venv=/root/venv_sglang211 gpu_compute_capabilities=8.6 import_test=true")["ct129"]
    assert not abi.get("failed"), abi
    assert abi["compatible"] is True, abi


def test_every_inventory_address_is_loopback_or_in_the_lab(inventory):
    hostvars = inventory["_meta"]["hostvars"]
    assert hostvars, "inventory/lab.yml lists no host"
    for name, hv in hostvars.items():
        addr = ipaddress.ip_address(hv["ansible_host"])
        assert addr.is_loopback or any(addr in net for net in LAB_NETS), (name, addr)
        for key, value in hv.items():
            for host in re.findall(r"https?://([^/:]+)", str(value)):
                ip = ipaddress.ip_address(host)
                assert ip.is_loopback or any(ip in net for net in LAB_NETS), (name, key, value)


def test_lab_up_again_changes_nothing(lab_hosts):
    """Re-running `lab up` with the lab up keeps every container (same id, same start) and the inventory."""
    def snapshot():
        out = lab.podman("inspect", "--format", "{{.Id}} {{.State.StartedAt}}",
                         *[h.container for h in lab_hosts]).stdout
        return out, lab.INVENTORY.read_text(), (lab.SSH_DIR / "known_hosts").read_text()
    before = snapshot()
    proc = lab.run([lab.sys.executable, str(lab.HERE / "lab.py"), "up"])
    assert "container started" not in proc.stdout and "provisioned" not in proc.stdout, proc.stdout
    assert snapshot() == before
