# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pkg_probe's logic: what is installed in a venv and whether the GPUs work."""

from __future__ import annotations

import time

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.host import gpu as G
from ansible_collections.dflash.deploy.plugins.module_utils.host.imports import import_many, service_env
from ansible_collections.dflash.deploy.plugins.module_utils.host.unprivileged import as_user, user_env
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import distributions as D
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import normalize_name
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.requirements import check as check_requirements
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.torch_facts import torch_facts
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import locate


def probe_distributions(venv_info, only=None, uv=None, run_as=None):
    """distributions, import_owners, unsatisfied, requirements_check, torch, findings (and problems: their
    details, one line each)."""
    site = venv_info["site_packages"]
    dists = D.scan(site)
    wanted = set(normalize_name(n) for n in only) if only else None
    findings = []

    def add(kind, path, detail):
        findings.append(F.make(kind, path, detail, severity=F.WARNING))

    out_dists = {}
    for key, dist in dists.items():
        detailed = wanted is None or key.split("#", 1)[0] in wanted
        if detailed:
            dist.update(D.check_files(site, dist))
            if dist["missing_count"] or dist["broken_symlink_count"]:
                add("record_missing_file", dist["dist_info"],
                    "%s %s: RECORD lists %d missing file(s) and %d broken symlink(s), e.g. %s" % (
                        dist["name"], dist["version"], dist["missing_count"], dist["broken_symlink_count"],
                        (dist["missing_files"] + dist["broken_symlinks"])[0]))
        for err in dist.get("errors", ()):
            add("dist_info_unreadable", dist["dist_info"], "%s: %s" % (dist["dist_info"], err))
        if "#" in key:
            add("duplicate_distribution", dist["dist_info"],
                "%s is installed more than once (%s)" % (dist["name"], dist["dist_info"]))
        out_dists[key] = D.public_view(dist, detailed)
    owners = D.import_owners(site, dists)
    for name, entry in owners.items():
        add("owner_conflict", name, "import %s is owned by %s; files on disk match %s" % (
            name, ", ".join(entry["distributions"]), ", ".join(entry["on_disk"]) or "neither RECORD"))
    req = check_requirements(dists, venv_info.get("python_version"), uv=uv,
                             python=venv_info["python"] if venv_info.get("python_exists") else None, user=run_as)
    if req["error"]:
        add("requirements_unchecked", None, req["error"])
    torch = torch_facts(site, dists)
    if torch and torch.get("problems"):
        for problem in torch["problems"]:
            add("torch_unreadable", torch.get("path"), "torch: %s" % problem)
    return {
        "distributions": out_dists,
        "import_owners": dict((k, v["distributions"]) for k, v in owners.items()),
        "import_owners_detail": owners,
        "unsatisfied": req["unsatisfied"],
        "requirements_check": {"method": req["method"], "error": req["error"]},
        "torch": torch,
        "findings": findings,
        "problems": [f["detail"] for f in findings],
    }


def probe_gpus(nvidia_smi, smoke=False, dev_dir="/dev", python=None, env=None, smi_timeout=15, smoke_timeout=30):
    """dict: gpus (list), driver_version, reason (why there are none), errors, device_nodes, smoke_test."""
    facts = G.nvidia_smi_facts(nvidia_smi, smi_timeout, env)
    gpus = facts["gpus"]
    out = {"gpus": gpus, "driver_version": facts["driver_version"], "reason": facts["reason"],
           "errors": facts["errors"]}
    # the node is /dev/nvidia<minor>; the index equals it only while no GPU before it is gone
    out["device_nodes"] = G.device_nodes(dev_dir, [g["minor"] if isinstance(g.get("minor"), int) else g["index"]
                                                   for g in gpus if isinstance(g["index"], int)])
    if out["reason"] and not out["device_nodes"]["nvidiactl"]:
        out["reason"] += "; %s is missing (no device nodes: driver not loaded or not passed into the container)" \
            % out["device_nodes"]["missing"][0]
    if not smoke:
        return out
    listing = G.list_driver_devices(python, timeout=smoke_timeout, env=env)
    out["cuda_driver_version"] = listing.get("cuda_driver_version")
    results = []
    if not listing.get("ok"):
        out["smoke_test"] = {"ok": False, "step": listing.get("step"), "error": listing.get("error"),
                             "gpus": []}
        if not gpus and not out["reason"]:
            out["reason"] = "CUDA driver: %s failed: %s" % (listing.get("step"), listing.get("error"))
        elif not gpus:
            out["reason"] += "; CUDA driver: %s failed: %s" % (listing.get("step"), listing.get("error"))
        return out
    devices = listing.get("devices", [])
    by_bus = dict((G.bus_key(g.get("pci_bus_id")), g) for g in gpus)
    targets = []
    for i, dev in enumerate(devices):
        smi = by_bus.get(G.bus_key(dev.get("pci_bus_id")))
        targets.append((i, dev, smi))
    tested = G.smoke_test([t[0] for t in targets], python, smoke_timeout, env)
    for i, dev, smi in targets:
        res = tested[i]
        entry = {"cuda_ordinal": i, "name": dev.get("name"), "compute_capability": dev.get("compute_capability"),
                 "pci_bus_id": dev.get("pci_bus_id"), "index": smi["index"] if smi else None,
                 "ok": bool(res.get("ok")), "step": res.get("step"), "error": res.get("error"),
                 "seconds": res.get("seconds")}
        if smi is not None:
            smi["smoke_test"] = entry
        else:
            entry["note"] = "not listed by nvidia-smi"
        results.append(entry)
    failed = [r for r in results if not r["ok"]]
    out["smoke_test"] = {"ok": bool(results) and not failed, "gpus": results,
                         "error": "; ".join("GPU %s (%s): %s at %s" % (
                             r["index"] if r["index"] is not None else r["cuda_ordinal"], r["pci_bus_id"],
                             r["error"], r["step"]) for r in failed) or None}
    return out


def probe_host_gpus(gpus, smoke, environment, nvidia_smi, dev_dir, smoke_timeout, t0):
    """The GPU part alone, for a host with no venv yet (preflight on a bare host): GPU facts under the
    module's own interpreter and environment; nothing about packages."""
    if not gpus:
        raise ValueError("without a venv there is nothing to probe but the GPUs: set gpus or gpu_smoke_test")
    result = {"gpu": probe_gpus(nvidia_smi, smoke, dev_dir, None, service_env(environment),
                                smoke_timeout=smoke_timeout)}
    result["gpus"] = result["gpu"]["gpus"]
    result["elapsed"] = round(time.monotonic() - t0, 3)
    return result


def probe(venv, imports=(), gpus=False, smoke=False, only=None, environment=None, uv=None, nvidia_smi=None,
          dev_dir="/dev", import_timeout=120, smoke_timeout=30, run_as=None):
    """The whole pkg_probe result (raises VenvError for a missing or non-venv path, UnprivilegedError for a
    ``run_as`` that cannot be used). With ``run_as`` the venv's interpreter runs as that user only."""
    t0 = time.monotonic()
    if venv is None:
        return probe_host_gpus(gpus or smoke, smoke, environment, nvidia_smi, dev_dir, smoke_timeout, t0)
    if run_as:
        as_user(run_as, [])  # refused before anything runs
    v = locate(venv)
    result = {"python": {"executable": v["python"], "version": v["python_version"], "exists": v["python_exists"]},
              "site_packages": v["site_packages"]}
    result.update(probe_distributions(v, only, uv, run_as))
    env = service_env(environment, base=user_env(run_as) if run_as else None)
    if imports:
        if v["python_exists"]:
            result["imports"] = import_many(v["python"], imports, timeout=import_timeout, env=env, user=run_as)
        else:
            result["imports"] = dict((n, {"ok": False, "version": None, "seconds": 0.0,
                                          "error": "venv interpreter %s is missing or a broken link" % v["python"]})
                                     for n in imports)
    else:
        result["imports"] = {}
    if gpus or smoke:
        result["gpu"] = probe_gpus(nvidia_smi, smoke, dev_dir, None, env, smoke_timeout=smoke_timeout)
        result["gpus"] = result["gpu"]["gpus"]
    result["elapsed"] = round(time.monotonic() - t0, 3)
    return result
