"""Run tests/gpu/kernel_smoke.check() inside the process that imports this (the server itself).

A test-only hook: put this directory on PYTHONPATH (through the instance's
`environment`, so the role writes it into the unit's EnvironmentFile) and set
DFLASH_GPU_CHECK_OUT to a file the service user may write. When Python starts
(``python -m sglang.launch_server`` from the unit's ExecStart), before the
server's own code, this imports torch and sgl_kernel, calls common_ops kernels
on a CUDA tensor, compares them with torch, and writes the JSON result. It
never stops the server: any error is written to the file instead.
"""
import json
import os
import sys

_out = os.environ.get("DFLASH_GPU_CHECK_OUT")
if _out and not os.environ.get("DFLASH_GPU_CHECK_DONE"):
    os.environ["DFLASH_GPU_CHECK_DONE"] = "1"  # children of the server do not run it again
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from kernel_smoke import check

        result = check(True, [])
        result["argv"] = list(sys.argv)
        result["orig_argv"] = list(getattr(sys, "orig_argv", []))
    except BaseException as exc:  # noqa: B902 - report everything, break nothing
        result = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    finally:
        if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
            sys.path.pop(0)
    try:
        with open(_out, "w") as fh:
            json.dump(result, fh, indent=1)
    except OSError:
        pass
