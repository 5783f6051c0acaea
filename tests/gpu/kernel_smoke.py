#!/usr/bin/env python3
"""Call sgl_kernel's common_ops on the GPU and compare with torch; optionally load other kernel libraries.

    python3 tests/gpu/kernel_smoke.py [--no-import] [--load LIB.so ...] [--json OUT]

Run with the interpreter (and environment) under test, e.g. the release's
``bin/python`` with the unit's environment (tests/gpu/kernel_hook runs
``check()`` inside the server process itself). It prints one JSON object:

* ``torch``: version, CUDA, device name and compute capability;
* ``sgl_kernel``: which common_ops file loaded, and for ``silu_and_mul`` and
  ``rmsnorm`` on bf16 CUDA tensors the largest difference from torch's own
  computation (``ok`` when within bf16 tolerance);
* ``load``: for each ``--load`` library, after ``import torch``: the dynamic
  loader's own answer (``ctypes.CDLL``, RTLD_GLOBAL) and torch's
  (``torch.ops.load_library``, with the error it chains), ``ok`` or the error
  text — what abi_check predicted.

Exit status 0 when every check asked for passed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _err(exc: BaseException) -> str:
    text = "%s: %s" % (type(exc).__name__, exc)
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) not in text:
        text += " <- %s: %s" % (type(cause).__name__, cause)
    return text


def check(do_import: bool = True, loads: list[str] | None = None) -> dict:
    out: dict = {"python": sys.executable, "pid": os.getpid(), "uid": os.getuid(), "cwd": os.getcwd(),
                 "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                 "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH")}
    ok = True
    start = time.monotonic()
    import torch

    out["torch"] = {"version": torch.__version__, "file": torch.__file__, "cuda": torch.version.cuda,
                    "available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        out["torch"]["device"] = torch.cuda.get_device_name(0)
        out["torch"]["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
    if do_import:
        try:
            import sgl_kernel

            info = {"file": getattr(sgl_kernel.common_ops, "__file__", None) or str(sgl_kernel.common_ops),
                    "package": sgl_kernel.__file__}
            torch.manual_seed(0)
            x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
            d = x.shape[-1] // 2
            got = sgl_kernel.silu_and_mul(x)
            ref = torch.nn.functional.silu(x[:, :d].float()) * x[:, d:].float()
            diff = (got.float() - ref).abs().max().item()
            info["silu_and_mul"] = {"shape": list(x.shape), "dtype": "bfloat16", "max_abs_diff": diff,
                                    "ok": bool(torch.allclose(got.float(), ref, atol=5e-2, rtol=2e-2))}
            w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
            got = sgl_kernel.rmsnorm(x, w, 1e-6)
            xf = x.float()
            ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
            diff = (got.float() - ref).abs().max().item()
            info["rmsnorm"] = {"max_abs_diff": diff,
                               "ok": bool(torch.allclose(got.float(), ref, atol=5e-2, rtol=2e-2))}
            torch.cuda.synchronize()
            ok = ok and info["silu_and_mul"]["ok"] and info["rmsnorm"]["ok"]
            out["sgl_kernel"] = info
        except Exception as exc:  # the failure is the finding
            out["sgl_kernel"] = {"error": _err(exc)}
            ok = False
    out["load"] = {}
    for lib in loads or []:
        res = {}
        try:
            import ctypes

            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            res["dlopen"] = "ok"
        except OSError as exc:
            res["dlopen"] = str(exc)
            ok = False
        try:
            torch.ops.load_library(lib)
            res["torch.ops.load_library"] = "ok"
        except Exception as exc:
            res["torch.ops.load_library"] = _err(exc)
            ok = False
        out["load"][lib] = res
    out["seconds"] = round(time.monotonic() - start, 3)
    out["ok"] = ok
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-import", action="store_true", help="do not import sgl_kernel (only --load)")
    ap.add_argument("--load", action="append", default=[])
    ap.add_argument("--json")
    opts = ap.parse_args()
    out = check(not opts.no_import, opts.load)
    text = json.dumps(out, indent=1)
    print(text)
    if opts.json:
        with open(opts.json, "w") as fh:
            fh.write(text + "\n")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
