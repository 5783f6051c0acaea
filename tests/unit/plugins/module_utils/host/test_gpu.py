"""host/gpu.py and probe_gpus against the fixture NVIDIA driver (libcuda.so.1 + nvidia-smi): healthy, dead, hung GPUs,
missing device nodes, a GPU another process holds, an nvidia-smi that hangs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import gpu as G
from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe_gpus


def write_config(tmp_path, gpus, dev_nodes=None, ctl=True):
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    state = tmp_path / "state"
    lines = ["driver_version=580.95.05", "cuda_driver_version=13000", "dev_dir=%s" % dev, "state_dir=%s" % state]
    for i, (cc, fault) in enumerate(gpus):
        lines += ["gpu.%d.name=Fixture GPU %d" % (i, i), "gpu.%d.cc=%s" % (i, cc), "gpu.%d.fault=%s" % (i, fault),
                  "gpu.%d.memory_mib=4096" % i, "gpu.%d.pci=00000000:%02X:00.0" % (i, 0x21 + i)]
    if ctl:
        (dev / "nvidiactl").write_text("")
    for i in range(len(gpus)) if dev_nodes is None else dev_nodes:
        (dev / ("nvidia%d" % i)).write_text("")
    cfg = tmp_path / "gpus.conf"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


@pytest.fixture
def driver_env(fixture_build):
    drv = fixture_build / "driver"

    def make(cfg):
        env = dict(os.environ)
        env["DFLASH_FIXTURE_GPU_CONFIG"] = str(cfg)
        env["LD_LIBRARY_PATH"] = str(drv / "lib")
        env["PATH"] = str(drv / "bin") + os.pathsep + env.get("PATH", "")
        return env, str(drv / "bin" / "nvidia-smi")
    return make


def test_parse_csv():
    gpus = G.parse_gpu_csv("0, GPU-a, NVIDIA RTX A6000, 8.6, 49140, 10, 580.95.05, 00000000:01:00.0\n"
                           "garbage line\n")
    assert gpus == [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA RTX A6000", "compute_capability": "8.6",
                     "memory_total_mib": 49140, "memory_used_mib": 10, "driver_version": "580.95.05",
                     "pci_bus_id": "00000000:01:00.0", "processes": []}]
    assert G.parse_apps_csv("GPU-a, 123, python, 600\n") == [
        {"gpu_uuid": "GPU-a", "pid": 123, "process_name": "python", "used_memory_mib": 600}]
    assert G.bus_key("00000000:21:00.0") == G.bus_key("0000:21:00.0")


def test_parse_minor_numbers():
    text = ("\n==============NVSMI LOG==============\n\nDriver Version : 580.95.05\nAttached GPUs : 3\n"
            "GPU 00000000:01:00.0\n    Product Name : NVIDIA RTX PRO 6000\n    GPU UUID : GPU-a\n"
            "    Minor Number                          : 0\n\n"
            "GPU 00000000:03:00.0\n    Minor Number : 2\n    PCI\n        Bus Id : 00000000:03:00.0\n"
            "GPU 00000000:04:00.0\n    Minor Number : N/A\n")
    assert G.parse_minor_numbers(text) == {G.bus_key("0000:01:00.0"): 0, G.bus_key("0000:03:00.0"): 2,
                                           G.bus_key("0000:04:00.0"): None}
    assert G.parse_minor_numbers("Minor Number : 5\n") == {}     # outside a GPU's section


def test_a_gpu_gone_from_the_bus_keeps_the_minor_of_the_ones_after_it(tmp_path, driver_env):
    cfg = write_config(tmp_path, [("12.0", "none"), ("12.0", "gone"), ("12.0", "none")])
    env, smi = driver_env(cfg)
    out = probe_gpus(smi, smoke=True, dev_dir=str(tmp_path / "dev"), env=env)
    assert [(g["index"], g["minor"], g["pci_bus_id"]) for g in out["gpus"]] == [
        (0, 0, "00000000:21:00.0"), (1, 2, "00000000:23:00.0")]
    assert out["smoke_test"]["ok"] and [r["index"] for r in out["smoke_test"]["gpus"]] == [0, 1]


def test_healthy_gpus(tmp_path, driver_env):
    env, smi = driver_env(write_config(tmp_path, [("12.0", "none"), ("12.0", "none")]))
    out = probe_gpus(smi, smoke=True, dev_dir=str(tmp_path / "dev"), env=env)
    assert out["reason"] is None and [g["compute_capability"] for g in out["gpus"]] == ["12.0", "12.0"]
    assert out["driver_version"] == "580.95.05" and out["cuda_driver_version"] == "13.0"
    assert out["smoke_test"]["ok"] is True
    assert [g["smoke_test"]["ok"] for g in out["gpus"]] == [True, True]
    assert [r["index"] for r in out["smoke_test"]["gpus"]] == [0, 1]


def test_dead_gpu(tmp_path, driver_env):
    env, smi = driver_env(write_config(tmp_path, [("12.0", "none"), ("12.0", "dead")]))
    out = probe_gpus(smi, smoke=True, dev_dir=str(tmp_path / "dev"), env=env)
    assert [g["index"] for g in out["gpus"]] == [0]
    assert any("Unable to determine the device handle" in e for e in out["errors"])
    st = out["smoke_test"]
    assert st["ok"] is False
    dead = [r for r in st["gpus"] if not r["ok"]]
    assert len(dead) == 1 and dead[0]["error"] == "CUDA_ERROR_UNKNOWN" and dead[0]["step"] == "cuCtxCreate"
    assert dead[0]["note"] == "not listed by nvidia-smi"
    assert st["error"] == "GPU 1 (0000:22:00.0): CUDA_ERROR_UNKNOWN at cuCtxCreate"


def test_hung_gpu_is_killed_not_waited_on(tmp_path, driver_env):
    env, smi = driver_env(write_config(tmp_path, [("9.0", "none"), ("9.0", "hang")]))
    out = probe_gpus(smi, smoke=True, dev_dir=str(tmp_path / "dev"), env=env, smi_timeout=2, smoke_timeout=3)
    assert out["reason"].startswith("nvidia-smi did not answer within 2s")
    res = out["smoke_test"]["gpus"]
    assert [r["ok"] for r in res] == [True, False]
    assert res[1]["error"].startswith("timed out after 3s") and res[1]["step"] == "cuCtxCreate"


def test_missing_device_nodes(tmp_path, driver_env):
    env, smi = driver_env(write_config(tmp_path, [("12.0", "none")], dev_nodes=[], ctl=False))
    out = probe_gpus(smi, smoke=True, dev_dir=str(tmp_path / "dev"), env=env)
    assert out["gpus"] == []
    assert out["device_nodes"]["nvidiactl"] is False
    assert "couldn't communicate with the NVIDIA driver" in out["reason"]
    assert "nvidiactl is missing" in out["reason"]
    assert out["smoke_test"]["error"] == "CUDA_ERROR_NO_DEVICE" and out["smoke_test"]["step"] == "cuInit"


def test_one_gpu_node_missing(tmp_path, driver_env):
    env, smi = driver_env(write_config(tmp_path, [("12.0", "none"), ("12.0", "none")], dev_nodes=[1]))
    out = probe_gpus(smi, smoke=True, dev_dir=str(tmp_path / "dev"), env=env)
    # as in a container given only the second GPU: nvidia-smi calls it 0, its node is /dev/nvidia1
    assert [(g["index"], g["minor"]) for g in out["gpus"]] == [(0, 1)]
    assert out["device_nodes"]["missing"] == []
    assert out["smoke_test"]["ok"] and len(out["smoke_test"]["gpus"]) == 1


def test_busy_gpu_still_tested_and_processes_listed(tmp_path, driver_env, fixture_build):
    cfg = write_config(tmp_path, [("8.6", "none")])
    env, smi = driver_env(cfg)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, sys, time\n"
        "cu = ctypes.CDLL('libcuda.so.1'); cu.cuInit(0)\n"
        "ctx = ctypes.c_void_p(); assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0\n"
        "p = ctypes.c_uint64(); assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(3000 << 20)) == 0\n"
        "print('ready', flush=True); time.sleep(60)\n")], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        out = probe_gpus(smi, smoke=True, dev_dir=str(tmp_path / "dev"), env=env)
        (g,) = out["gpus"]
        assert g["memory_used_mib"] >= 3000 and [p["pid"] for p in g["processes"]] == [holder.pid]
        assert g["smoke_test"]["ok"] is True
    finally:
        holder.kill()
        holder.wait()


def test_no_nvidia_smi_and_no_driver(tmp_path):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    out = probe_gpus(None, smoke=True, dev_dir=str(tmp_path), env=env)
    assert out["reason"].startswith("nvidia-smi not found")
    assert "libcuda.so.1" in out["smoke_test"]["error"] and out["smoke_test"]["step"] == "load libcuda.so.1"


def test_nvidia_smi_that_hangs(tmp_path):
    fake = tmp_path / "nvidia-smi"
    pidfile = tmp_path / "pid"
    fake.write_text("#!/bin/sh\necho $$ > %s\nexec sleep 60\n" % pidfile)
    fake.chmod(0o755)
    out = G.nvidia_smi_facts(str(fake), timeout=1)
    assert not Path("/proc", pidfile.read_text().strip()).exists()  # killed and reaped, not waited on
    assert out["reason"] == "nvidia-smi did not answer within 1s (a hung GPU or driver)"
