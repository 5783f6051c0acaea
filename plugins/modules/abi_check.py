#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: abi_check
short_description: Decide statically whether compiled Python extensions will load and run in a venv
version_added: "0.1.0"
description:
  - For every ELF file of the named packages (default C(sgl_kernel)), decides from the files alone whether it
    will load and run, reading only section headers, C(.dynamic), C(.dynsym)/C(.dynstr), C(.gnu.version_r) and
    C(.nv_fatbin) with C(mmap) (real libtorch libraries are hundreds of MB; the whole check takes well under a
    second).
  - Every DT_NEEDED is resolved the way the dynamic loader would after C(import torch) - already loaded
    libraries (torch/lib and the CUDA libraries torch loads or preloads from the venv's C(nvidia/*/lib)), the
    file's RPATH/RUNPATH with C($ORIGIN), C(LD_LIBRARY_PATH) from O(environment), then the system's ld.so cache
    and default directories (or O(system_root) / O(system_library_dirs)). A missing C(libcuda.so.1) is its own
    finding kind (C(driver_missing)).
  - The CUDA major the extension was built for (from the cudart/cublas/cublasLt/nvrtc SONAMEs) is compared with
    torch's; undefined C(c10::)/C(at::)/C(torch::) symbols are looked up in the installed torch libraries; the
    SM architectures in C(.nv_fatbin) are matched against the GPUs' compute capabilities; GLIBC/GLIBCXX
    versions required are matched against the libraries that will provide them.
  - Libraries are not all equal. C(sgl_kernel) loads C(sm90/common_ops) (compute capability 9.0) or
    C(sm100/common_ops) (others) at import; a problem there is an error. C(flash_ops), C(flashmla_ops) and
    C(spatial_ops) load lazily per feature; a problem there is a warning unless O(features) or
    O(attention_backend) says the server uses that feature. The other C(common_ops) is never loaded on these
    GPUs (info).
  - With O(python_api), also checks statically, without importing anything and without a GPU, that the
    Python names the named packages import from other distributions exist there (finding kind
    C(missing_python_name)); see O(python_api).
  - Never changes anything; C(changed) is always false.
author:
  - dflash.deploy contributors (@dflash)
options:
  venv:
    description: Path of the virtual environment to read (the directory holding C(pyvenv.cfg)).
    type: path
    required: true
  packages:
    description: Import packages or distribution names whose ELF files to check.
    type: list
    elements: str
    default: [sgl_kernel]
  gpu_compute_capabilities:
    description:
      - Compute capabilities of the GPUs the service will use, such as C(12.0).
      - When not set they are read from C(nvidia-smi); when none are found the architecture check is skipped
        and a finding (C(arch_check_skipped)) says so.
    type: list
    elements: str
  environment:
    description:
      - Environment variables the service will run with. C(LD_LIBRARY_PATH) is used in library resolution;
        all of them are set for O(import_test).
    type: dict
    default: {}
  system_root:
    description:
      - Root of the tree that provides "the system" libraries (its C(etc/ld.so.cache), else its
        C(ld.so.conf) directories, then the default directories), for checking a venv meant for another host.
    type: path
    default: /
  system_library_dirs:
    description:
      - Explicit list of system library directories to search, in order, instead of an ld.so cache.
      - Mutually exclusive with O(system_root).
    type: list
    elements: path
  features:
    description:
      - Features the server will use whose libraries load lazily, making their findings errors.
      - Known names are C(fa3) or C(flash_attn) (C(flash_ops)), C(flashmla) (C(flashmla_ops)) and C(spatial)
        (C(spatial_ops)). Another name is ignored with a warning naming it.
    type: list
    elements: str
    default: []
  attention_backend:
    description:
      - The server's C(--attention-backend). C(fa3) requires C(flash_ops), C(flashmla) requires
        C(flashmla_ops); others (C(flashinfer), C(triton)) need no lazily loaded C(sgl_kernel) library.
    type: str
  import_test:
    description:
      - Also import each package with the venv's interpreter in a subprocess with O(environment), as a second
        opinion. A failed import is an error finding (C(import_failed)).
    type: bool
    default: false
  python_api:
    description:
      - Also check the Python API between distributions, from the source files alone (parsed with C(ast), never
        imported), as a CUDA host would run them.
      - For each entry of O(packages), the import closure of the modules its server starts from is followed
        through the package's own files (for C(sglang) - C(sglang.launch_server), the HTTP server, the
        scheduler, its model runner and the detokenizer; for another package, the package itself), and every
        C(from X import name) where X belongs to another distribution is checked - C(name) must be defined at
        module level in X (C(def), C(class), assignment, import, C(__all__), star imports followed within X) or
        be a submodule C(X.name).
      - Platform guards are evaluated as on a CUDA host - C(is_cuda()), C(_is_cuda), C(is_cuda_alike()) are
        true; the same forms for C(hip), C(xpu), C(npu), C(cpu), C(musa), C(mps), and C(TYPE_CHECKING), are
        false; C(not)/C(and)/C(or) combine them; any other condition leaves both branches reachable.
      - A missing name is an error when the server imports it at start; a warning when the import is inside
        C(try/except ImportError) (or C(Exception), bare C(except)), in such an C(except) handler, or only in
        code that runs when a function is called (outside the start-up closure).
      - Conservative - nothing is reported for a module whose names cannot be known from its text (a
        module-level C(__getattr__), C(exec), names written into C(globals()), a star import outside its
        package, an extension module, a namespace package, a file that does not parse).
      - Use it with C(sglang) in O(packages) to catch an sglang release that calls kernels its C(sgl_kernel)
        does not have (sglang 0.5.9 beside sglang-kernel 0.4.2), which otherwise shows only when the server
        starts on a GPU host.
    type: bool
    default: false
  fail_on_error:
    description: Fail the task when the check finds an error. With C(false), read RV(compatible) instead.
    type: bool
    default: true
extends_documentation_fragment:
  - dflash.deploy.venv_reader
notes:
  - Python loads extensions with C(RTLD_NOW), so every non-weak undefined symbol is looked up in the
    library's load scope (torch's libraries, its own NEEDED closure); missing C(c10::)/C(at::)/C(torch::)
    symbols are reported against the installed torch, others against the library that should provide them.
    Symbols the interpreter provides (C(Py*)) are assumed present.
  - C(libcuda.so.1) is the driver's library; on a host that has none the extension cannot load.
seealso:
  - module: dflash.deploy.pkg_probe
"""

EXAMPLES = r"""
- name: Will sgl_kernel load on this host's GPUs with the configured backend
  dflash.deploy.abi_check:
    venv: /opt/dflash/releases/{{ release_id }}
    attention_backend: flashinfer
    environment:
      LD_LIBRARY_PATH: /opt/dflash/releases/{{ release_id }}/lib/python3.12/site-packages/nvidia/cu13/lib

- name: Check a venv for the RTX PRO 6000 host on a build host, against that host's libraries
  dflash.deploy.abi_check:
    venv: /srv/build/venv
    gpu_compute_capabilities: ["12.0"]
    system_root: /srv/images/gpu-host
    fail_on_error: false
  register: abi

- name: Show the root cause
  ansible.builtin.debug:
    msg: "{{ abi.msg }}"
  when: not abi.compatible

- name: Will sglang's server find the kernels it imports (no GPU needed)
  dflash.deploy.abi_check:
    venv: /opt/dflash/releases/{{ release_id }}
    packages: [sgl_kernel, sglang]
    python_api: true
    gpu_compute_capabilities: ["9.0"]

- name: Static verdict plus a real import as a second opinion
  dflash.deploy.abi_check:
    venv: /opt/dflash/releases/{{ release_id }}
    packages: [sgl_kernel, flashinfer]
    import_test: true
"""

RETURN = r"""
compatible:
  description: True when no finding is an error.
  returned: always
  type: bool
  sample: false
msg:
  description: One line naming the root cause and the fix a person would take, or C(compatible).
  returned: always
  type: str
  sample: >-
    sgl_kernel/sm100/common_ops.abi3.so needs libcudart.so.13 (CUDA 13) but torch is 2.11.0+cu128 (CUDA 12.8);
    libcudart.so.13 not found: install torch 2.11.0 built for CUDA 13 (local tag +cu13*), or a sgl_kernel
    build for CUDA 12 made for torch 2.11.0
torch:
  description: torch's build facts (version with local tag, CUDA version), or null when torch is not installed.
  returned: always
  type: dict
  sample: {"version": "2.11.0+cu130", "local": "cu130", "cuda": "13.0", "cuda_major": 13}
findings:
  description: What was found, errors first.
  returned: always
  type: list
  elements: dict
  contains:
    kind:
      description:
        - C(venv_invalid), C(package_not_found), C(torch_missing), C(cuda_major_mismatch), C(driver_missing),
          C(library_not_found), C(undefined_symbol), C(no_gpu_code), C(glibc_version_missing), C(not_elf),
          C(corrupt_elf), C(unreadable), C(broken_symlink), C(dependency_unreadable), C(missing_python_name),
          C(import_failed), C(record_missing_file), C(owner_conflict), C(arch_check_skipped),
          C(python_api_incomplete).
      type: str
    path:
      description:
        - The file (relative to site-packages when inside it), package or venv concerned.
        - For C(missing_python_name), the importing file and line, such as C(sglang/srt/layers/sampler.py:22).
      type: str
    detail:
      description: One line saying what is wrong.
      type: str
    severity:
      description: C(error), C(warning) or C(info).
      type: str
    load:
      description:
        - When the file loads, C(import), C(lazy) or C(unused).
        - For C(missing_python_name), C(import) when the server imports it at start, else C(lazy).
      type: str
    module:
      description: For C(missing_python_name), the module imported from (C(sgl_kernel)).
      type: str
    name:
      description: For C(missing_python_name), the name it lacks (C(min_p_sampling_from_probs)).
      type: str
    distributions:
      description: For C(missing_python_name), the distributions that own the module imported from.
      type: list
      elements: str
    fix:
      description: What a person would do about it.
      type: str
  sample:
    - kind: no_gpu_code
      severity: warning
      load: lazy
      path: sgl_kernel/flash_ops.abi3.so
      detail: sgl_kernel/flash_ops.abi3.so has no code for compute capability 12.0 (has sm_80, sm_86, sm_90a)
files:
  description:
    - Per ELF file, C(path), C(package), C(load), C(required), C(soname), C(needed) (name, resolved path and
      how), C(rpath), C(runpath), C(cuda_major), C(archs), C(torch_symbols_needed), C(torch_symbols_missing)
      and C(version_needs) (highest version per library).
  returned: always
  type: list
  elements: dict
gpu_compute_capabilities:
  description: The compute capabilities checked against, or null when none were known.
  returned: always
  type: list
  elements: str
  sample: ["12.0"]
gpu_detection:
  description: How the compute capabilities were obtained (C(option), C(nvidia-smi)) or why none were.
  returned: always
  type: str
python_api:
  description:
    - Per package, what O(python_api) read - C(entries) (the modules the walk started from), C(modules) (how
      many of the package's modules it read), C(start_modules) (of those, imported at server start),
      C(missing) (names not found), C(unparsed) (up to five files that did not parse) and C(truncated).
  returned: when O(python_api)
  type: dict
  sample:
    sglang: {"entries": ["sglang.launch_server"], "modules": 723, "start_modules": 458, "missing": 13,
             "unparsed": [], "truncated": false}
torch_import:
  description: What the simulated C(import torch) loaded (count, CUDA libraries preloaded, unresolved).
  returned: when torch is installed
  type: dict
import_test:
  description: Result of the real import per package (C(ok), C(version), C(seconds), C(error)).
  returned: when O(import_test)
  type: dict
system:
  description: Where system libraries were looked up.
  returned: always
  type: dict
elapsed:
  description: Seconds the check took (the static part and, with O(import_test), the import).
  returned: always
  type: float
  sample: 0.31
static_elapsed:
  description: Seconds the static check took.
  returned: always
  type: float
  sample: 0.29
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi
    from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.import_test import with_import_test
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload.cuda_compat import format_cc, parse_cc
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload.loadplan import (
        FEATURE_LIBRARIES,
        unknown_features,
    )
    from ansible_collections.dflash.deploy.plugins.module_utils.host.gpu import nvidia_smi_facts
    from ansible_collections.dflash.deploy.plugins.module_utils.host.imports import (
        check_environment,
        check_timeouts,
        service_env,
    )
    from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import find_program
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def detect_ccs(module, environment):
    smi = find_program("nvidia-smi")  # by absolute path in the system's directories, never PATH
    facts = nvidia_smi_facts(smi, 15, service_env(environment))
    ccs = []
    for g in facts["gpus"]:
        try:
            ccs.append(parse_cc(g["compute_capability"]))
        except (TypeError, ValueError):
            continue
    if ccs:
        return ccs, "nvidia-smi"
    return None, facts["reason"] or "nvidia-smi listed no compute capability"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            packages=dict(type="list", elements="str", default=["sgl_kernel"]),
            gpu_compute_capabilities=dict(type="list", elements="str"),
            environment=dict(type="dict", default={}),
            system_root=dict(type="path", default="/"),
            system_library_dirs=dict(type="list", elements="path"),
            features=dict(type="list", elements="str", default=[]),
            attention_backend=dict(type="str"),
            import_test=dict(type="bool", default=False),
            import_timeout=dict(type="int", default=120),
            python_api=dict(type="bool", default=False),
            fail_on_error=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("system_root", "system_library_dirs")],
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    problem = check_environment(p["environment"]) or check_timeouts(import_timeout=p["import_timeout"])
    if problem:
        module.fail_json(msg=problem, changed=False)
    environment = dict((str(k), str(v)) for k, v in (p["environment"] or {}).items())
    for name in unknown_features(p["features"]):
        module.warn("features: %r is not a feature abi_check knows (%s); it is ignored"
                    % (name, ", ".join(sorted(FEATURE_LIBRARIES))))
    features = list(p["features"])
    if p["attention_backend"]:
        features.append(p["attention_backend"])
    if p["gpu_compute_capabilities"]:
        try:
            ccs = [parse_cc(v) for v in p["gpu_compute_capabilities"]]
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        detection = "option"
    else:
        ccs, detection = detect_ccs(module, environment)

    result = abi.check(p["venv"], packages=p["packages"], gpu_ccs=ccs, environment=environment,
                       system_root=p["system_root"], system_library_dirs=p["system_library_dirs"],
                       features=[f for f in features if f.strip().lower() in FEATURE_LIBRARIES],
                       python_api=p["python_api"])
    result["static_elapsed"] = result["elapsed"]
    result["gpu_compute_capabilities"] = [format_cc(c) for c in ccs] if ccs else None
    result["gpu_detection"] = detection
    if p["import_test"]:
        with_import_test(result, p["venv"], p["packages"], environment, timeout=p["import_timeout"])
    if not result["compatible"] and p["fail_on_error"]:
        msg = result.pop("msg")
        module.fail_json(msg=msg, changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
