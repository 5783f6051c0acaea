"""Lab fixture: the incident's stop-gap server on ct200.

Creates a CUDA context on the first visible GPU through the (fixture) driver,
so nvidia-smi lists it as a compute process, and answers HTTP on its port.
Standard library only; runs under the host's system Python.
"""
import argparse
import ctypes
import http.server
import json
import sys


def hold_gpu():
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for step, rc in (("cuInit", lambda: cuda.cuInit(0)),
                     ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0)),
                     ("cuCtxCreate", lambda: cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))):
        code = rc()
        if code:
            sys.exit(f"stop-gap: {step} failed with CUDA error {code}")
    return ctx


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"server": "ddtree-stopgap", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=30000)
    args = p.parse_args()
    ctx = hold_gpu()  # noqa: F841  (kept for the life of the process)
    http.server.ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
