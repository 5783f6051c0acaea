#!/usr/bin/env python3
"""Call sgl_kernel's common_ops on the GPU and compare with torch; optionally load other kernel libraries.

    python3 tests/gpu/kernel_smoke.py [--no-import] [--load LIB.so ...] [--json OUT]

Run with the interpreter (and environment) under test, e.g. the release's
``bin/python`` with the unit's environment. It prints one JSON object:

* ``torch``: version, CUDA, device name and compute capability;
* ``sgl_kernel``: which common_ops file loaded, and for ``silu_and_mul`` and
  ``rmsnorm`` on bf16 CUDA tensors the largest difference from torch's own
  computation (``ok`` when within bf16 tolerance);
* ``load``: for each ``--load`` library, ``torch.ops.load_library`` after
  ``import torch``: ok, or the loader's error (what abi_check predicts).

Exit status 0 when every check asked for passed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-import", action="store_true", help="do not import sgl_kernel (only --load)")
    ap.add_argument("--load", action="append", default=[])
    ap.add_argument("--json")
    opts = ap.parse_args()
    out: dict = {"python": sys.executable}
    ok = True
    start = time.monotonic()
    import torch

    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                    "available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        out["torch"]["device"] = torch.cuda.get_device_name(0)
        out["torch"]["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
    if not opts.no_import:
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
            info["silu_and_mul"] = {"shape": list(x.shape), "max_abs_diff": diff,
                                    "ok": bool(torch.allclose(got.float(), ref, atol=2e-2, rtol=2e-2))}
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
            out["sgl_kernel"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
            ok = False
    out["load"] = {}
    for lib in opts.load:
        try:
            torch.ops.load_library(lib)
            out["load"][lib] = "ok"
        except Exception as exc:
            out["load"][lib] = "%s: %s" % (type(exc).__name__, exc)
            ok = False
    out["seconds"] = round(time.monotonic() - start, 3)
    out["ok"] = ok
    text = json.dumps(out, indent=1)
    print(text)
    if opts.json:
        with open(opts.json, "w") as fh:
            fh.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
