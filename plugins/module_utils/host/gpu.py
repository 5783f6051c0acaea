# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU facts from nvidia-smi and a smoke test through the CUDA driver API.

The smoke test needs no torch: ctypes on ``libcuda.so.1`` (cuInit, device,
context, a 1 MiB allocation, free, destroy), one subprocess per GPU with a
timeout, so a dead GPU is reported and a hung one is killed instead of
waited on.  Other processes on the GPU are not disturbed by 1 MiB.
"""

from __future__ import annotations

import os
import sys
import time

from ansible_collections.dflash.deploy.plugins.module_utils.host import smoke_child
from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import (
    child_source,
    fan_out,
    parse_report,
    run_with_timeout,
)

GPU_QUERY = "index,uuid,name,compute_cap,memory.total,memory.used,driver_version,pci.bus_id"
APP_QUERY = "gpu_uuid,pid,process_name,used_memory"


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


def parse_minor_numbers(text):
    """{bus_key: minor} from ``nvidia-smi -q``. Each GPU's section starts with an unindented
    ``GPU <bus id>`` line and holds ``Minor Number : N``, the N of its ``/dev/nvidia<N>``: fixed for
    the card, where nvidia-smi's index counts the GPUs the driver knows and shifts when one before
    it drops off the bus. ``N/A`` (no device node on that platform) gives None."""
    minors = {}
    current = None
    for line in text.splitlines():
        if line.startswith("GPU ") and ":" in line:
            current = bus_key(line[4:])
        elif current is not None and line.strip().startswith("Minor Number"):
            value = line.partition(":")[2].strip()
            minors[current] = int(value) if value.isdigit() else None
    return minors


def nvidia_smi_facts(nvidia_smi, timeout=15, env=None):
    """dict: gpus (list), driver_version, errors (list of str), reason (str or None when GPUs were listed).
    Each GPU's ``minor`` (its /dev/nvidia<minor>) comes from ``nvidia-smi -q``; None when unknown."""
    out = {"gpus": [], "driver_version": None, "errors": [], "reason": None}
    if not nvidia_smi:
        out["reason"] = ("nvidia-smi not found on PATH or in /usr/sbin, /usr/bin, /sbin, /bin, where only root can "
                         "change it (no NVIDIA driver installed?)")
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
    rcq, stdoutq, _errq, timed_outq = run_with_timeout([nvidia_smi, "-q"], timeout, env)
    minors = {} if timed_outq or rcq is None else parse_minor_numbers(stdoutq)
    if timed_outq:
        out["errors"].append("nvidia-smi -q did not answer within %ss: no minor numbers" % timeout)
    for g in gpus:
        g["minor"] = minors.get(bus_key(g["pci_bus_id"]))
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
        [python or sys.executable, "-c", child_source(smoke_child), "list"], timeout, _child_env(env, None))
    if timed_out:
        return {"ok": False, "devices": [], "step": "enumerate", "error": "timed out after %ss" % timeout}
    res = parse_report(stdout)
    if res is None:
        return {"ok": False, "devices": [], "step": "enumerate",
                "error": "smoke test process died (rc %s): %s" % (rc, (stderr.strip().splitlines() or [""])[-1])}
    res.setdefault("devices", [])
    return res


def smoke_test_one(target, python=None, timeout=30, env=None):
    """Prove one GPU works; ``target`` is a UUID or an index (PCI bus order)."""
    t0 = time.monotonic()
    rc, stdout, stderr, timed_out = run_with_timeout(
        [python or sys.executable, "-c", child_source(smoke_child), "one"], timeout, _child_env(env, target))
    elapsed = round(time.monotonic() - t0, 3)
    if timed_out:
        steps = [line[len("@@STEP@@"):] for line in stdout.splitlines() if line.startswith("@@STEP@@")]
        return {"ok": False, "step": steps[-1] if steps else "start", "seconds": elapsed,
                "error": "timed out after %ss: the GPU does not answer (hung)" % timeout}
    res = parse_report(stdout)
    if res is None:
        return {"ok": False, "step": "start", "seconds": elapsed,
                "error": "smoke test process died (rc %s): %s" % (rc, (stderr.strip().splitlines() or [""])[-1])}
    res["seconds"] = elapsed
    return res


def smoke_test(targets, python=None, timeout=30, env=None, workers=8):
    """{target: result} for every target, in parallel."""
    return fan_out(lambda t: smoke_test_one(t, python, timeout, env), targets, workers)
