# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release verdict: is a built release "verified" (docs/architecture.md)?

    findings = probe | dflash.deploy.release_findings(abi_results, superseded, requirements, cuda_major)

    inputs = instances | dflash.deploy.verification_inputs(gpu_probe, checks)

    imports = base_imports | dflash.deploy.verify_imports(workers, instances)

    record = probe | dflash.deploy.verified_record(fingerprint, release_id, inputs_digest)

A release is verified when the list is empty. Each finding is one line a person can act on,
root causes first: two owners of one import name, a requirement of the DFlash sources that
the venv does not meet, torch built for another CUDA major, an unsatisfied requirement that
is not on the declared superseded list, abi_check's verdict, a failed import.

The inputs are what a verdict depends on besides the release's files (the GPUs and driver, the
instances' backends and features, the checks asked for); the marker of a verified release records
their digest, so a release is verified again when they change (release_fingerprint).

Pure functions of pkg_probe's and abi_check's results; requirement names are compared
normalised (PEP 503) and versions with `packaging` (which ansible-core itself requires).
"""
from __future__ import annotations

import re

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version
except ImportError:  # ansible-core requires packaging; this only keeps the import itself harmless
    Requirement = Version = None
    InvalidRequirement = InvalidVersion = ValueError

_NORM = re.compile(r"[-_.]+")


def normalize(name: str) -> str:
    """PEP 503 name normalisation: runs of -, _ and . become one -, lower case."""
    return _NORM.sub("-", name).lower()


def requirement_name(requirement: str) -> str:
    try:
        return normalize(Requirement(requirement).name)
    except InvalidRequirement:
        m = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
        return normalize(m.group(0)) if m else ""


def owner_findings(probe: dict) -> list[str]:
    """One import name installed by two distributions (sgl_kernel by sgl-kernel and sglang-kernel)."""
    owners = probe.get("import_owners") or {}
    return [f"import name {name} is owned by {' and '.join(sorted(owners[name]))} (kernel_pin removes the look-alike)"
            for name in sorted(owners)]


def _public_version(version: str) -> Version | None:
    try:
        return Version(Version(version).public)
    except (InvalidVersion, TypeError):
        return None


def requirement_findings(probe: dict, requirements: list) -> list[str]:
    """What the DFlash sources declare (e.g. sglang-kernel>=0.4.2), against the installed versions.

    The local tag is ignored (2.11.0+cu130 satisfies ==2.11.0), as pip does for specifiers
    without one."""
    dists = {normalize(k): v for k, v in (probe.get("distributions") or {}).items()}
    out = []
    for text in requirements:
        req = Requirement(text)
        name = normalize(req.name)
        if name not in dists:
            hint = ""
            if name == "sglang-kernel" and "sgl-kernel" in dists:
                hint = (f"; sgl-kernel {dists['sgl-kernel'].get('version')} is installed and also provides "
                        "sgl_kernel (kernel_pin)")
            out.append(f"the DFlash sources need {text}: {name} is not installed{hint}")
            continue
        installed = dists[name].get("version") or ""
        version = _public_version(installed)
        if version is None or not req.specifier.contains(version, prereleases=True):
            out.append(f"the DFlash sources need {text}: {name} {installed or '(no version)'} is installed")
    return out


def torch_findings(probe: dict, cuda_major: int) -> list[str]:
    torch = probe.get("torch") or {}
    if torch.get("cuda_major") == int(cuda_major):
        return []
    return [f"torch {torch.get('version') or 'not installed'} is built for CUDA {torch.get('cuda') or 'none'}; "
            f"the DFlash stack needs CUDA {cuda_major} (cuda_overlay)"]


def unsatisfied_findings(probe: dict, superseded: list) -> list[str]:
    """pip-check style problems, less the declared ones ({distribution, requirement} by name)."""
    declared = {(normalize(s["distribution"]), normalize(s["requirement"])) for s in superseded}
    out = []
    for u in probe.get("unsatisfied") or []:
        key = (normalize(u.get("distribution") or ""), requirement_name(u.get("requirement") or ""))
        if key in declared:
            continue
        have = f"installed {u['installed']}" if u.get("installed") else "not installed"
        out.append(f"{u.get('distribution')} {u.get('version')} requires {u.get('requirement')}: "
                   f"{have} ({u.get('problem')})")
    return out


def abi_findings(abi_results: list) -> list[str]:
    out = []
    for r in abi_results or []:
        if r.get("skipped") or r.get("compatible") is True:
            continue
        label = (r.get("item") or {}).get("name") if isinstance(r.get("item"), dict) else r.get("item")
        prefix = f"abi_check ({label}): " if label else "abi_check: "
        out.append(prefix + (r.get("msg") or "not compatible"))
    return out


def import_findings(probe: dict) -> list[str]:
    imports = probe.get("imports") or {}
    return [f"import {name} failed: {imports[name].get('error')}"
            for name in sorted(imports) if not imports[name].get("ok")]


def release_findings(probe: dict, abi_results: list, superseded: list, requirements: list,
                     cuda_major: int) -> list[str]:
    """Every reason the release is not verified, root causes first; [] when it is verified."""
    if Requirement is None:
        raise RuntimeError("the release_findings filter needs the 'packaging' library on the controller")
    if probe.get("failed"):
        return [f"pkg_probe failed: {probe.get('msg')}"]
    return (owner_findings(probe) + requirement_findings(probe, requirements) + torch_findings(probe, cuda_major)
            + unsatisfied_findings(probe, superseded) + abi_findings(abi_results) + import_findings(probe))


# What an instance brings to verification: abi_check checks its GPUs, attention backend and features, and the
# import test runs in its environment. Its name, port, models and API key are the unit's business, not the
# release's, and stay out of the digest.
_INSTANCE_INPUTS = ("gpus", "attention_backend", "features", "environment")
# What the GPU probe says about a card that verification depends on (not its memory use or processes).
_CARD_INPUTS = ("index", "uuid", "name", "compute_capability")


def verification_inputs(instances: list, gpu_probe: dict, checks: dict) -> dict | None:
    """Everything a verification verdict depends on besides the release's files, or None when unknown.

    `checks` holds what verification is asked (imports, superseded, requirements, torch CUDA major, the
    service environment); `gpu_probe` is preflight's pkg_probe result. Without a GPU list (preflight skipped
    or failed to read the GPUs) the inputs are unknown: None, and the release is verified again.
    """
    gpus = (gpu_probe or {}).get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return None
    assigned = {i for inst in instances or [] for i in inst.get("gpus") or []}
    cards = sorted(({k: g.get(k) for k in _CARD_INPUTS} for g in gpus
                    if isinstance(g, dict) and g.get("index") in assigned), key=lambda c: str(c.get("index")))
    return {
        "checks": checks,
        "driver_version": gpu_probe.get("driver_version"),
        "cards": cards,
        "instances": [{k: inst.get(k) for k in _INSTANCE_INPUTS} for inst in instances or []],
    }


def verify_imports(imports: list, workers: dict, instances: list) -> list:
    """The modules the import smoke test imports: ``imports`` in order, then the worker module of each present
    instance's speculative algorithm (``workers``, by the algorithm's upper-case name), each once. An instance
    without an algorithm, or with one ``workers`` does not name, adds nothing."""
    workers = workers or {}
    wanted = [workers.get(str(inst.get("speculative_algorithm") or "").upper()) for inst in instances or []]
    out = []
    for name in list(imports or []) + wanted:
        if name and name not in out:
            out.append(name)
    return out


def verified_record(probe: dict, fingerprint: dict, release_id: str, inputs_digest: str) -> dict:
    """The marker of a verified release: its id, the fingerprint (digest and file count) it was verified with,
    the digest of the verification inputs, torch's version and each distribution as ``name==version``, sorted
    without regard to case."""
    probe = probe if isinstance(probe, dict) else {}
    torch = probe.get("torch") if isinstance(probe.get("torch"), dict) else {}
    dists = probe.get("distributions") if isinstance(probe.get("distributions"), dict) else {}
    return {
        "release_id": release_id,
        "fingerprint": fingerprint["sha256"],
        "files": fingerprint["files"],
        "inputs": inputs_digest,
        "torch": torch.get("version"),
        # in Jinja's sort order (case-insensitive), which the markers written before this filter have
        "distributions": sorted((f"{d['name']}=={d['version']}" for d in dists.values()), key=str.lower),
    }


class FilterModule:
    def filters(self):
        return {"release_findings": release_findings, "verification_inputs": verification_inputs,
                "verify_imports": verify_imports, "verified_record": verified_record}
