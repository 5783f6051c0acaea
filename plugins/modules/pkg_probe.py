#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: pkg_probe
short_description: Report what is installed in a Python venv, and whether the GPUs work
version_added: "0.1.0"
description:
  - Reads a venv's interpreter, site-packages and every installed distribution from its C(*.dist-info) files
    (name, version with local tag such as C(+cu130), installer, requirements, top-level import names) with the
    Python standard library, in one process. METADATA and WHEEL are read with C(email.parser.HeaderParser)
    (compat32 policy), as C(importlib.metadata) reads them; top-level names follow
    C(importlib.metadata.packages_distributions) of the Python running the module (C(top_level.txt), else
    every file of RECORD on 3.12 and newer, its C(.py) files before).
  - Reports import names owned by more than one distribution (C(sgl_kernel) from both C(sgl-kernel) and
    C(sglang-kernel)) and which owner's RECORD matches the files on disk.
  - Reports unsatisfied requirements as C(pip check) does, evaluated with C(packaging) when it imports on the
    host, else with C(uv pip check); the result says when neither could run. A requirement behind an extra
    (C(extra == "test")) or behind a marker false on this host and the venv's Python is not reported.
  - Reads torch's build facts (version, local tag, CUDA version) from its files without importing torch.
  - Optionally imports named modules with the venv's interpreter, each in its own subprocess with a timeout,
    in parallel (half the host's CPUs at a time, at least 4 and at most 16).
  - Optionally reports GPUs from C(nvidia-smi), and proves each GPU works through the CUDA driver API (ctypes
    on C(libcuda.so.1) to initialise, get the device, create a context, allocate and free 1 MiB), one
    subprocess per GPU with a timeout, so a dead or hung GPU is reported instead of waited on. This needs no
    torch, so it works on a bare host.
  - Never changes anything; C(changed) is always false.
author:
  - dflash.deploy contributors (@dflash)
options:
  venv:
    description:
      - Path of the virtual environment to read (the directory holding C(pyvenv.cfg)).
      - Left out, only the GPUs are probed (O(gpus) or O(gpu_smoke_test) must be set, and O(imports),
        O(distributions) and O(run_as) must not be); preflight uses this on a host with no venv yet.
    type: path
  imports:
    description:
      - Module names to import with the venv's interpreter, each in its own subprocess.
    type: list
    elements: str
    default: []
  run_as:
    description:
      - Run the venv's interpreter (the O(imports) and C(uv pip check)'s interpreter query) as this
        unprivileged user, through C(/usr/bin/setpriv) with the user's groups, no new privileges and the
        user's C(HOME); a C(.pth) file or module a wheel brought then runs without root.
      - Refused before anything runs when the user is unknown, has uid 0, or C(/usr/bin/setpriv) is not a
        root-owned file. Unset, the interpreter runs as the module's user.
      - The GPU probes run the module's own interpreter and C(nvidia-smi), not the venv's.
    type: str
  distributions:
    description:
      - Limit the detailed fields (installer, requires, top-level names, RECORD file check) to these
        distributions. Every distribution is still listed with its name and version.
    type: list
    elements: str
  environment:
    description:
      - Environment variables the service will run with (for example C(LD_LIBRARY_PATH)), added to the
        module's environment for the import checks and the GPU subprocesses.
    type: dict
    default: {}
  gpus:
    description: Report GPU facts from C(nvidia-smi) (index, name, compute capability, memory, driver, processes).
    type: bool
    default: false
  gpu_smoke_test:
    description:
      - Also prove each GPU the driver enumerates works, through the CUDA driver API, one subprocess per GPU.
      - Implies O(gpus).
    type: bool
    default: false
  smoke_test_timeout:
    description: Seconds the driver enumeration and each GPU's smoke test may take.
    type: int
    default: 30
  device_dir:
    description: Directory where the NVIDIA device nodes (C(nvidiactl), C(nvidia<N>)) are expected.
    type: path
    default: /dev
extends_documentation_fragment:
  - dflash.deploy.venv_reader
requirements:
  - C(packaging) on the managed host, or C(uv) on its PATH, to evaluate requirements.
notes:
  - The GPU smoke test allocates 1 MiB per GPU in a fresh context; a GPU another process uses is tested too.
  - Import names that several distributions share only through empty C(__init__.py) files (namespace
    packages such as C(nvidia)) are not reported as owned by more than one distribution.
seealso:
  - module: dflash.deploy.abi_check
"""

EXAMPLES = r"""
- name: What is installed in the release venv
  dflash.deploy.pkg_probe:
    venv: /opt/dflash/releases/{{ release_id }}
  register: probe

- name: Probe the GPUs of a host with no venv yet (nvidia-smi and the driver-API smoke test)
  dflash.deploy.pkg_probe:
    gpu_smoke_test: true
  register: gpu_probe

- name: Refuse a venv where two distributions install sgl_kernel
  ansible.builtin.assert:
    that: "'sgl_kernel' not in probe.import_owners"
    fail_msg: "sgl_kernel is installed by {{ probe.import_owners.sgl_kernel | default([]) | join(' and ') }}"

- name: Import the server's packages the way the service will
  dflash.deploy.pkg_probe:
    venv: /opt/dflash/releases/{{ release_id }}
    imports: [torch, sgl_kernel, sglang]
    environment:
      LD_LIBRARY_PATH: /opt/dflash/releases/{{ release_id }}/lib/python3.12/site-packages/nvidia/cu13/lib

- name: Prove the assigned GPUs still work (bare host, before any torch exists)
  dflash.deploy.pkg_probe:
    venv: /opt/dflash/releases/{{ release_id }}
    gpu_smoke_test: true
    smoke_test_timeout: 20
  register: gpu_probe
"""

RETURN = r"""
python:
  description: The venv's interpreter.
  returned: when O(venv) is set
  type: dict
  contains:
    executable:
      description: Path of the venv's C(bin/python).
      type: str
    version:
      description: Python version from C(pyvenv.cfg).
      type: str
    exists:
      description: Whether the interpreter exists (false for a broken link).
      type: bool
  sample: {"executable": "/opt/venv/bin/python", "version": "3.12.3", "exists": true}
site_packages:
  description: The venv's site-packages directory.
  returned: when O(venv) is set
  type: str
  sample: /opt/venv/lib/python3.12/site-packages
distributions:
  description:
    - Installed distributions by normalized name. C(installer), C(requires), C(top_level), C(files) and the
      RECORD check fields are returned for the distributions selected by O(distributions) (all by default).
    - C(record_sha256) - sha256 over the RECORD entries (path, hash, size) of the files the distribution put
      in site-packages (scripts, byte code and the installer's own dist-info files left out), so the same
      version installed from other bytes has another. null without RECORD entries.
  returned: when O(venv) is set
  type: dict
  sample:
    sglang-kernel:
      name: sglang-kernel
      version: 0.4.2
      installer: uv
      requires: []
      top_level: [sgl_kernel]
      files: 12
      missing_count: 0
      missing_files: []
      broken_symlink_count: 0
      broken_symlinks: []
import_owners:
  description: Import names owned by more than one distribution, with their owners' normalized names.
  returned: when O(venv) is set
  type: dict
  sample: {"sgl_kernel": ["sgl-kernel", "sglang-kernel"]}
import_owners_detail:
  description:
    - For each name in RV(import_owners), how many files the owners share and whose RECORD hashes match the
      files on disk (the distribution installed last). The hashes compared are those of the 20 smallest shared
      files of at most 1 MiB each, so the probe stays fast on large wheels.
  returned: when O(venv) is set
  type: dict
  sample: {"sgl_kernel": {"distributions": ["sgl-kernel", "sglang-kernel"], "shared_files": 6,
           "on_disk": ["sglang-kernel"]}}
unsatisfied:
  description: Requirements not satisfied, pip-check style.
  returned: when O(venv) is set
  type: list
  elements: dict
  contains:
    distribution:
      description: The distribution that declares the requirement.
      type: str
    version:
      description: Its version.
      type: str
    requirement:
      description: The requirement as declared.
      type: str
    installed:
      description: The version installed, or null when missing.
      type: str
    problem:
      description: C(missing), C(conflict), or why it could not be evaluated.
      type: str
  sample: [{"distribution": "sglang", "version": "0.5.9", "requirement": "torch==2.9.1",
            "installed": "2.11.0+cu130", "problem": "conflict"}]
requirements_check:
  description: How requirements were evaluated (C(packaging), C(uv) or null) and why not, if they were not.
  returned: when O(venv) is set
  type: dict
  sample: {"method": "packaging", "error": null}
torch:
  description: torch's build facts read from its files, or null when torch is not installed.
  returned: when O(venv) is set
  type: dict
  contains:
    version:
      description: Build version with local tag, from C(torch/version.py).
      type: str
    distribution_version:
      description: Version in the dist-info (PyPI builds may omit the local tag there).
      type: str
    local:
      description: Local version tag, such as C(cu130).
      type: str
    cuda:
      description: CUDA version torch was built for.
      type: str
    cuda_major:
      description: Its major number.
      type: int
    path:
      description: The torch package directory.
      type: str
  sample: {"version": "2.11.0+cu130", "distribution_version": "2.11.0", "local": "cu130", "cuda": "13.0",
           "cuda_major": 13}
imports:
  description: Result of each import check, by module name.
  returned: when O(venv) is set
  type: dict
  sample: {"sgl_kernel": {"ok": false, "version": null, "seconds": 1.8,
           "error": "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"}}
gpus:
  description:
    - GPUs listed by C(nvidia-smi); each has C(index), C(uuid), C(name), C(compute_capability),
      C(memory_total_mib), C(memory_used_mib), C(driver_version), C(pci_bus_id), C(processes),
      C(minor) and, with O(gpu_smoke_test), C(smoke_test).
    - C(index) is nvidia-smi's, which counts the GPUs the driver knows in PCI order, so it shifts when a
      GPU before it drops off the bus; C(minor) (from C(nvidia-smi -q), null when unknown) is the N of the
      card's C(/dev/nvidia<N>), fixed for the card; C(uuid) names the card.
  returned: when O(gpus) or O(gpu_smoke_test)
  type: list
  elements: dict
  sample: [{"index": 1, "minor": 1, "uuid": "GPU-b6000000-0200-4000-8000-000000000001",
            "pci_bus_id": "00000000:02:00.0", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "compute_capability": "12.0",
            "memory_total_mib": 97887, "memory_used_mib": 0, "driver_version": "580.95.05",
            "processes": [], "smoke_test": {"ok": true, "step": "done", "seconds": 0.4}}]
gpus_reason:
  description: Why no GPU is listed (no nvidia-smi, no driver, no device nodes, nvidia-smi hung), else null.
  returned: when O(gpus) or O(gpu_smoke_test)
  type: str
  sample: "nvidia-smi rc 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
gpu_errors:
  description: Lines nvidia-smi printed on stderr, such as a GPU whose handle cannot be read.
  returned: when O(gpus) or O(gpu_smoke_test)
  type: list
  elements: str
driver_version:
  description: The NVIDIA driver version.
  returned: when O(gpus) or O(gpu_smoke_test)
  type: str
  sample: 580.95.05
cuda_driver_version:
  description: CUDA version the driver supports (cuDriverGetVersion), to compare with torch's CUDA.
  returned: when O(gpu_smoke_test)
  type: str
  sample: "13.0"
device_nodes:
  description: Which NVIDIA device nodes exist in O(device_dir).
  returned: when O(gpus) or O(gpu_smoke_test)
  type: dict
  sample: {"dir": "/dev", "nvidiactl": true, "missing": []}
gpu_smoke_test:
  description:
    - Overall smoke test result; C(gpus) holds one entry per device the driver enumerates (C(ok), C(step),
      C(error), C(seconds), C(index) of the matching nvidia-smi GPU).
  returned: when O(gpu_smoke_test)
  type: dict
  sample: {"ok": false, "error": "GPU 1 (00000000:21:00.0): CUDA_ERROR_UNKNOWN at cuCtxCreate", "gpus": []}
findings:
  description:
    - What the probe found wrong while reading, in the vocabulary of M(dflash.deploy.abi_check) (C(kind),
      C(path), C(detail), C(severity)). Kinds are C(record_missing_file), C(dist_info_unreadable),
      C(duplicate_distribution), C(owner_conflict), C(requirements_unchecked) and C(torch_unreadable); the
      severity is always C(warning) (pkg_probe describes; the release verdict decides).
  returned: when O(venv) is set
  type: list
  elements: dict
  sample: [{"kind": "owner_conflict", "path": "sgl_kernel", "severity": "warning",
            "detail": "import sgl_kernel is owned by sgl-kernel, sglang-kernel; files on disk match sgl-kernel"}]
problems:
  description: The details of RV(findings), one line each, in the same order.
  returned: when O(venv) is set
  type: list
  elements: str
elapsed:
  description: Seconds the probe took.
  returned: always
  type: float
  sample: 0.21
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.host.imports import check_environment, check_timeouts
    from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import find_program
    from ansible_collections.dflash.deploy.plugins.module_utils.host.unprivileged import UnprivilegedError
    from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe
    from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path"),
            imports=dict(type="list", elements="str", default=[]),
            import_timeout=dict(type="int", default=120),
            distributions=dict(type="list", elements="str"),
            environment=dict(type="dict", default={}),
            gpus=dict(type="bool", default=False),
            gpu_smoke_test=dict(type="bool", default=False),
            smoke_test_timeout=dict(type="int", default=30),
            device_dir=dict(type="path", default="/dev"),
            run_as=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    problem = check_environment(p["environment"]) or check_timeouts(
        import_timeout=p["import_timeout"], smoke_test_timeout=p["smoke_test_timeout"])
    if problem:
        module.fail_json(msg=problem, changed=False)
    want_gpus = p["gpus"] or p["gpu_smoke_test"]
    if p["venv"] is None:
        needs_venv = [k for k in ("imports", "distributions", "run_as") if p[k]]
        if needs_venv or not want_gpus:
            module.fail_json(changed=False, msg="pkg_probe without venv probes the GPUs only: %s" % (
                "set venv to use %s" % ", ".join(needs_venv) if needs_venv else "set gpus or gpu_smoke_test"))
    try:
        result = probe(
            p["venv"], imports=p["imports"], gpus=want_gpus, smoke=p["gpu_smoke_test"],
            only=p["distributions"], environment=p["environment"],
            uv=module.get_bin_path("uv"),
            nvidia_smi=find_program("nvidia-smi") if want_gpus else None,  # never by PATH
            dev_dir=p["device_dir"], import_timeout=p["import_timeout"], smoke_timeout=p["smoke_test_timeout"],
            run_as=p["run_as"],
        )
    except UnprivilegedError as exc:
        module.fail_json(msg=str(exc), changed=False, venv=p["venv"])
    except VenvError as exc:
        module.fail_json(msg=exc.detail, changed=False, venv=p["venv"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg="pkg_probe could not read %s: %s" % (p["venv"], exc), changed=False)
    gpu = result.pop("gpu", None)
    if gpu is not None:
        result["gpus"] = gpu["gpus"]
        result["gpus_reason"] = gpu["reason"]
        result["gpu_errors"] = gpu["errors"]
        result["driver_version"] = gpu["driver_version"]
        result["device_nodes"] = gpu["device_nodes"]
        if "smoke_test" in gpu:
            result["gpu_smoke_test"] = gpu["smoke_test"]
            result["cuda_driver_version"] = gpu.get("cuda_driver_version")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
