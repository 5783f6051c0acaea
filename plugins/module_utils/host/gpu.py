# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU facts from nvidia-smi and a smoke test through the CUDA driver API.

The smoke test needs no torch: ctypes on ``libcuda.so.1`` (cuInit, device,
context, a 1 MiB allocation, free, destroy), one subprocess per GPU with a
timeout, so a dead GPU is reported and a hung one is killed instead of
waited on.  Other processes on the GPU are not disturbed by 1 MiB.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

GPU_QUERY = "index,uuid,name,compute_cap,memory.total,memory.used,driver_version,pci.bus_id"
APP_QUERY = "gpu_uuid,pid,process_name,used_memory"


def run_with_timeout(argv, timeout, env=None):
    """(rc, stdout, stderr, timed_out); the whole process group is killed on timeout."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
    except OSError as exc:
        return None, "", str(exc), False
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = proc.communicate()
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), True


def _num(text):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def parse_gpu_csv(text):
    """Rows of ``--query-gpu=GPU_QUERY --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 8:
            continue
        gpus.append({
            "index": _num(cols[0]),
            "uuid": cols[1],
            "name": cols[2],
            "compute_capability": cols[3] if cols[3] not in ("[N/A]", "N/A", "") else None,
            "memory_total_mib": _num(cols[4]),
            "memory_used_mib": _num(cols[5]),
            "driver_version": cols[6],
            "pci_bus_id": cols[7],
            "processes": [],
        })
    return gpus


def parse_apps_csv(text):
    apps = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 4:
            continue
        apps.append({"gpu_uuid": cols[0], "pid": _num(cols[1]), "process_name": cols[2],
                     "used_memory_mib": _num(cols[3])})
    return apps


def nvidia_smi_facts(nvidia_smi, timeout=15, env=None):
    """dict: gpus (list), driver_version, errors (list of str), reason (str or None when GPUs were listed)."""
    out = {"gpus": [], "driver_version": None, "errors": [], "reason": None}
    if not nvidia_smi:
        out["reason"] = "nvidia-smi not found on PATH (no NVIDIA driver installed?)"
        return out
    rc, stdout, stderr, timed_out = run_with_timeout(
        [nvidia_smi, "--query-gpu=" + GPU_QUERY, "--format=csv,noheader,nounits"], timeout, env)
    if timed_out:
        out["reason"] = "nvidia-smi did not answer within %ss (a hung GPU or driver)" % timeout
        return out
    if rc is None:
        out["reason"] = "nvidia-smi could not run: %s" % stderr.strip()
        return out
    gpus = parse_gpu_csv(stdout)
    for line in stderr.splitlines():
        if line.strip():
            out["errors"].append(line.strip())
    if not gpus:
        msg = (stderr.strip() or stdout.strip()).splitlines()
        out["reason"] = "nvidia-smi rc %s: %s" % (rc, msg[0] if msg else "no GPUs listed")
        return out
    out["gpus"] = gpus
    out["driver_version"] = gpus[0]["driver_version"]
    rc2, stdout2, _err2, timed_out2 = run_with_timeout(
        [nvidia_smi, "--query-compute-apps=" + APP_QUERY, "--format=csv,noheader,nounits"], timeout, env)
    if timed_out2:
        out["errors"].append("nvidia-smi --query-compute-apps did not answer within %ss" % timeout)
    else:
        by_uuid = dict((g["uuid"], g) for g in gpus)
        for app in parse_apps_csv(stdout2):
            g = by_uuid.get(app.pop("gpu_uuid"))
            if g is not None:
                g["processes"].append(app)
    return out


def bus_key(bus_id):
    """Comparable PCI address: nvidia-smi's 00000000:21:00.0 and the driver's 0000:21:00.0 agree."""
    if not bus_id:
        return None
    try:
        domain, bus, rest = bus_id.strip().lower().split(":")
        dev, fn = rest.split(".")
        return int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16)
    except ValueError:
        return bus_id.strip().lower()


def device_nodes(dev_dir, indexes):
    """Which NVIDIA device nodes exist: dict(dir, nvidiactl, missing)."""
    missing = []
    ctl = os.path.exists(os.path.join(dev_dir, "nvidiactl"))
    if not ctl:
        missing.append(os.path.join(dev_dir, "nvidiactl"))
    for i in indexes:
        p = os.path.join(dev_dir, "nvidia%d" % i)
        if not os.path.exists(p):
            missing.append(p)
    return {"dir": dev_dir, "nvidiactl": ctl, "missing": missing}


# Runs in a child interpreter: standard library + libcuda.so.1 only.
SMOKE_SCRIPT = r'''
import ctypes, json, sys, time
mode = sys.argv[1]
res = {"ok": False, "step": "load libcuda.so.1"}
def emit():
    sys.stdout.write("\n@@DFLASH@@" + json.dumps(res) + "\n"); sys.stdout.flush()
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    res["error"] = str(e); emit(); sys.exit(0)
def name(rc):
    p = ctypes.c_char_p()
    try:
        if cu.cuGetErrorName(rc, ctypes.byref(p)) == 0 and p.value:
            return p.value.decode()
    except Exception:
        pass
    return "CUresult %d" % rc
def call(step, fn, *args):
    res["step"] = step
    sys.stdout.write("@@STEP@@%s\n" % step); sys.stdout.flush()
    rc = fn(*args)
    if rc != 0:
        res["error"] = name(rc); emit(); sys.exit(0)
v = ctypes.c_int()
cu.cuDriverGetVersion(ctypes.byref(v))
res["cuda_driver_version"] = "%d.%d" % (v.value // 1000, v.value % 1000 // 10)
call("cuInit", cu.cuInit, 0)
n = ctypes.c_int()
call("cuDeviceGetCount", cu.cuDeviceGetCount, ctypes.byref(n))
def describe(i):
    d = ctypes.c_int()
    call("cuDeviceGet", cu.cuDeviceGet, ctypes.byref(d), i)
    buf = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", cu.cuDeviceGetName, buf, 256, d)
    ma, mi = ctypes.c_int(), ctypes.c_int()
    call("cuDeviceGetAttribute", cu.cuDeviceGetAttribute, ctypes.byref(ma), 75, d)
    call("cuDeviceGetAttribute", cu.cuDeviceGetAttribute, ctypes.byref(mi), 76, d)
    pci = ctypes.create_string_buffer(64)
    bus = None
    if cu.cuDeviceGetPCIBusId(pci, 64, d) == 0:
        bus = pci.value.decode()
    return d, {"name": buf.value.decode(), "compute_capability": "%d.%d" % (ma.value, mi.value), "pci_bus_id": bus}
if mode == "list":
    res["devices"] = [describe(i)[1] for i in range(n.value)]
    res["ok"] = True; res["step"] = "done"; emit(); sys.exit(0)
t0 = time.monotonic()
dev, info = describe(0)
res.update(info)
ctx = ctypes.c_void_p()
call("cuCtxCreate", cu.cuCtxCreate_v2, ctypes.byref(ctx), 0, dev)
ptr = ctypes.c_uint64()
call("cuMemAlloc", cu.cuMemAlloc_v2, ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
call("cuCtxSynchronize", cu.cuCtxSynchronize)
call("cuMemFree", cu.cuMemFree_v2, ptr)
call("cuCtxDestroy", cu.cuCtxDestroy_v2, ctx)
res["ok"] = True; res["step"] = "done"; res["seconds"] = round(time.monotonic() - t0, 3)
emit()
'''


def _parse_child(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith("@@DFLASH@@"):
            try:
                return json.loads(line[len("@@DFLASH@@"):])
            except ValueError:
                return None
    return None


def _child_env(env, visible):
    e = dict(os.environ if env is None else env)
    e["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if visible is None:
        e.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        e["CUDA_VISIBLE_DEVICES"] = str(visible)
    return e


def list_driver_devices(python=None, timeout=20, env=None):
    """Devices the driver enumerates (no context created): dict(ok, devices, error, step)."""
    rc, stdout, stderr, timed_out = run_with_timeout(
        [python or sys.executable, "-c", SMOKE_SCRIPT, "list"], timeout, _child_env(env, None))
    if timed_out:
        return {"ok": False, "devices": [], "step": "enumerate", "error": "timed out after %ss" % timeout}
    res = _parse_child(stdout)
    if res is None:
        return {"ok": False, "devices": [], "step": "enumerate",
                "error": "smoke test process died (rc %s): %s" % (rc, (stderr.strip().splitlines() or [""])[-1])}
    res.setdefault("devices", [])
    return res


def smoke_test_one(target, python=None, timeout=30, env=None):
    """Prove one GPU works; ``target`` is a UUID or an index (PCI bus order)."""
    t0 = time.monotonic()
    rc, stdout, stderr, timed_out = run_with_timeout(
        [python or sys.executable, "-c", SMOKE_SCRIPT, "one"], timeout, _child_env(env, target))
    elapsed = round(time.monotonic() - t0, 3)
    if timed_out:
        steps = [line[len("@@STEP@@"):] for line in stdout.splitlines() if line.startswith("@@STEP@@")]
        return {"ok": False, "step": steps[-1] if steps else "start", "seconds": elapsed,
                "error": "timed out after %ss: the GPU does not answer (hung)" % timeout}
    res = _parse_child(stdout)
    if res is None:
        return {"ok": False, "step": "start", "seconds": elapsed,
                "error": "smoke test process died (rc %s): %s" % (rc, (stderr.strip().splitlines() or [""])[-1])}
    res["seconds"] = elapsed
    return res


def smoke_test(targets, python=None, timeout=30, env=None, workers=8):
    """{target: result} for every target, in parallel."""
    targets = list(targets)
    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        results = list(pool.map(lambda t: smoke_test_one(t, python, timeout, env), targets))
    return dict((t, results[i]) for i, t in enumerate(targets))
