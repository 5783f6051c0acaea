#!/usr/bin/env python3
"""Real-GPU validation of the dflash.deploy modules (run on a GPU host, e.g. an H200).

Runs from the repo root on a machine with a real NVIDIA driver and a real
torch 2.11.0+cu130 venv (the device's /opt/torch/.venv, Python 3.12), no
network and no systemd. The modules run the way Ansible runs them on a host:
as `python3 plugins/modules/<name>.py ARGS.json`, with ansible-core (carried
as a wheel) and the collection on PYTHONPATH.

What it checks, each step recorded in OUT/validation.json:
  1. pkg_probe on the real venv: distributions, torch facts read from files,
     nvidia-smi GPU facts and the driver-API smoke test on the real GPU.
  2. abi_check on real extension packages (torchvision, torchaudio) against
     the real torch tree and the real GPU's compute capability, with the
     import test as second opinion; its own `elapsed`.
  3. `.nv_fatbin` SM lists read by module_utils/elfload/fatbin.py against
     `cuobjdump --list-elf` on the same files.
  4. site_packages_transplant of torch/triton/nvidia-* and torch's pure
     dependencies into a fresh uv venv (copy, then hardlink into a second
     one, then a no-op re-run), timed beside `cp -a`/`cp -al` of the same
     trees, followed by a CUDA matmul in the new venv.

Usage: python3 tests/gpu/validate.py --venv /opt/torch/.venv --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[gpu-validate {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Runner:
    def __init__(self, work: Path, pythonpath: list[str]):
        self.work = work
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(pythonpath + [self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.n = 0

    def module(self, name: str, args: dict, timeout: int = 600) -> dict:
        self.n += 1
        argfile = self.work / f"args-{self.n}-{name}.json"
        argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(REPO / "plugins" / "modules" / f"{name}.py"), str(argfile)],
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )
        wall = time.monotonic() - start
        try:
            result = json.loads(proc.stdout)
        except json.JSONDecodeError:
            result = {"failed": True, "msg": "module printed no JSON", "stdout": proc.stdout[-4000:]}
        result["_wall_s"] = round(wall, 3)
        if proc.stderr:
            result["_stderr_tail"] = proc.stderr[-2000:]
        return result


def timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return time.monotonic() - start, proc


def site_packages(venv: Path) -> Path:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    return Path(out)


def cuobjdump_sms(path: Path) -> list[str] | None:
    exe = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(exe):
        return None
    proc = subprocess.run([exe, "--list-elf", str(path)], capture_output=True, text=True)
    sms = set()
    for line in proc.stdout.splitlines():
        # "ELF file    1: _C.1.sm_80.cubin"
        for part in line.replace(".", " ").split():
            if part.startswith("sm_"):
                sms.add(part[3:])
    return sorted(sms)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", default="/opt/torch/.venv")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-validate-out"))
    ap.add_argument("--site", default="/tmp/site", help="where the carried ansible-core wheel was installed")
    opts = ap.parse_args()

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpuval-"))
    ac = work / "ac" / "ansible_collections" / "dflash"
    ac.mkdir(parents=True)
    (ac / "deploy").symlink_to(REPO)
    runner = Runner(work, [str(work / "ac"), opts.site])
    venv = Path(opts.venv)
    report: dict = {"date": time.strftime("%Y-%m-%d"), "venv": str(venv)}

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True)
    report["nvidia_smi"] = smi.stdout.strip()
    log(f"GPU: {report['nvidia_smi']}")

    # 1. pkg_probe with GPU facts and smoke test
    log("pkg_probe (gpus, gpu_smoke_test, imports torch/triton)")
    probe = runner.module("pkg_probe", {"venv": str(venv), "gpus": True, "gpu_smoke_test": True,
                                        "imports": ["torch", "triton"]})
    report["pkg_probe"] = {k: probe.get(k) for k in ("failed", "msg", "python", "torch", "gpus", "imports",
                                                      "unsatisfied", "import_owners", "elapsed", "_wall_s",
                                                      "_stderr_tail")}
    report["pkg_probe"]["distribution_count"] = len(probe.get("distributions") or {})
    log(f"  -> torch={probe.get('torch')} gpus={json.dumps(probe.get('gpus'))[:400]} wall={probe['_wall_s']}s")

    # 2. abi_check on real extension packages against the real torch and GPU
    sp = site_packages(venv)
    for pkg in ("torchvision", "torchaudio", "triton"):
        if not (sp / pkg).is_dir():
            continue
        log(f"abi_check {pkg} (import_test)")
        res = runner.module("abi_check", {"venv": str(venv), "packages": [pkg], "import_test": True,
                                          "fail_on_error": False})
        report[f"abi_check_{pkg}"] = {k: res.get(k) for k in ("failed", "msg", "compatible", "findings",
                                                               "elapsed", "_wall_s", "torch", "import_test",
                                                               "gpu_compute_capabilities", "_stderr_tail")}
        report[f"abi_check_{pkg}"]["files_checked"] = len(res.get("files") or [])
        log(f"  -> compatible={res.get('compatible')} elapsed={res.get('elapsed')} "
            f"findings={len(res.get('findings') or [])} msg={str(res.get('msg'))[:200]}")
        res2 = runner.module("abi_check", {"venv": str(venv), "packages": [pkg], "fail_on_error": False})
        report[f"abi_check_{pkg}"]["static_only_elapsed"] = res2.get("elapsed")
        report[f"abi_check_{pkg}"]["static_only_wall_s"] = res2.get("_wall_s")

    # 3. fatbin parser vs cuobjdump
    sys.path.insert(0, str(work / "ac"))
    try:
        from ansible_collections.dflash.deploy.plugins.module_utils.elfload import elf as elf_mod
        from ansible_collections.dflash.deploy.plugins.module_utils.elfload import fatbin as fatbin_mod
    except Exception as exc:  # report, keep going
        report["fatbin_crosscheck_error"] = repr(exc)
        elf_mod = fatbin_mod = None
    cross = []
    if fatbin_mod is not None:
        candidates = sorted((sp / "torchvision").glob("*.so")) + sorted((sp / "torch" / "lib").glob("libc10_cuda.so"))
        candidates += sorted((sp / "torch" / "lib").glob("libtorch_cuda.so"))
        for path in candidates:
            start = time.monotonic()
            try:
                ours = sorted(fatbin_sms(elf_mod, fatbin_mod, path))
            except Exception as exc:
                ours = [f"error: {exc!r}"]
            secs = round(time.monotonic() - start, 3)
            theirs = cuobjdump_sms(path)
            cross.append({"file": str(path.relative_to(sp)), "size_mb": round(path.stat().st_size / 2**20, 1),
                          "ours": ours, "cuobjdump": theirs, "seconds": secs,
                          "agree": theirs is not None and set(ours) == set(theirs)})
            log(f"  fatbin {path.name}: ours={ours} cuobjdump={theirs} ({secs}s)")
    report["fatbin_crosscheck"] = cross

    # 4. transplant torch trees into a fresh uv venv, then compute on the GPU
    uv = shutil.which("uv")
    report["transplant"] = t = {}
    if uv is None:
        t["skipped"] = "uv not found"
    else:
        dists = requirement_closure(venv, "torch")
        t["distributions"] = dists
        log(f"torch and what it requires: {len(dists)} distributions")
        base_python = str(venv / "bin" / "python3")
        for label, link in (("copy", "copy"), ("hardlink", "hardlink")):
            dest = work / f"venv-{label}"
            subprocess.run([uv, "venv", "--quiet", "--python", base_python, str(dest)], check=True)
            log(f"transplant ({label}) into {dest}")
            res = runner.module("site_packages_transplant", {"src": str(venv), "dest": str(dest),
                                                             "distributions": dists, "link": link})
            t[label] = {k: res.get(k) for k in ("failed", "msg", "changed", "elapsed", "_wall_s", "files_copied",
                                                 "files_linked", "bytes_copied", "bytes_linked", "_stderr_tail")}
            t[label]["moved"] = len(res.get("moved") or [])
            log(f"  -> changed={res.get('changed')} elapsed={res.get('elapsed')} moved={t[label]['moved']} "
                f"msg={str(res.get('msg'))[:300]}")
            again = runner.module("site_packages_transplant", {"src": str(venv), "dest": str(dest),
                                                               "distributions": dists, "link": link})
            t[label]["noop_changed"] = again.get("changed")
            t[label]["noop_elapsed"] = again.get("elapsed")
            t[label]["noop_wall_s"] = again.get("_wall_s")
            log(f"  no-op re-run: changed={again.get('changed')} elapsed={again.get('elapsed')}")
            after = runner.module("pkg_probe", {"venv": str(dest), "imports": ["torch"]})
            t[label]["probe_after"] = {"unsatisfied": after.get("unsatisfied"), "imports": after.get("imports"),
                                       "torch": (after.get("torch") or {}).get("version")}
            log(f"  pkg_probe of the new venv: unsatisfied={after.get('unsatisfied')} "
                f"import torch={(after.get('imports') or {}).get('torch')}")
            code = ("import torch, time; a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); "
                    "torch.cuda.synchronize(); s = time.time(); b = a @ a; torch.cuda.synchronize(); "
                    "print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), "
                    "float(b.float().abs().mean()), round(time.time() - s, 4))")
            proc = subprocess.run([str(dest / "bin" / "python"), "-c", code], capture_output=True, text=True,
                                  timeout=300)
            t[label]["cuda_run"] = {"rc": proc.returncode, "stdout": proc.stdout.strip(),
                                    "stderr": proc.stderr.strip()[-1500:]}
            log(f"  CUDA in new venv: rc={proc.returncode} {proc.stdout.strip()} {proc.stderr.strip()[-300:]}")
        # the baselines on the same trees
        dsp = site_packages(work / "venv-copy")
        trees = [p for p in sp.iterdir() if p.name in ("torch", "triton", "nvidia")]
        for label, flag in (("cp_a", "-a"), ("cp_al", "-al")):
            target = work / f"baseline-{label}"
            target.mkdir()
            secs, proc = timed(["cp", flag, *map(str, trees), str(target)])
            t[f"baseline_{label}_s"] = round(secs, 3)
            log(f"  baseline cp {flag}: {secs:.2f}s rc={proc.returncode}")
        t["dest_site_packages"] = str(dsp)

    (out / "validation.json").write_text(json.dumps(report, indent=2, default=str))
    log(f"wrote {out / 'validation.json'}")
    return 0


def requirement_closure(venv: Path, root: str) -> list[str]:
    """`root` and every distribution it requires (transitively), as installed in venv."""
    from importlib import metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    installed = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions(path=[str(site_packages(venv))])}
    seen, done, todo = set(), set(), [(root, "")]
    while todo:
        name, extra = todo.pop()
        name = canonicalize_name(name)
        if (name, extra) in done or name not in installed:
            continue
        done.add((name, extra))
        seen.add(name)
        for line in installed[name].requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo.extend((req.name, e) for e in sorted(req.extras) or [""])
                todo.append((req.name, ""))
    return sorted(seen)


def fatbin_sms(elf_mod, fatbin_mod, path: Path) -> set[str]:
    """SM names ('80', '90a', ...) of the cubins in a file's .nv_fatbin, read by our own code."""
    with elf_mod.ElfFile(str(path)) as ef:
        rng = ef.section_range(".nv_fatbin")
        if rng is None:
            return set()
        offset, size = rng
        entries = fatbin_mod.scan(ef.mm, offset, offset + size)
        # cuobjdump --list-elf lists cubins only (PTX is --list-ptx)
        return set(fatbin_mod.sm_list([e for e in entries if e["kind"] == "cubin"]))


if __name__ == "__main__":
    sys.exit(main())
