# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU smoke test's child: the CUDA driver API through ctypes, no torch.

Runs as ``python -c <this file's text> list|one`` (host/gpu.py sends it, with
CUDA_VISIBLE_DEVICES naming the GPU for ``one``); standard library and
``libcuda.so.1`` only, nothing from the collection.

- ``list``: the devices the driver enumerates (no context is created).
- ``one``: device 0 of those visible: a context, a 1 MiB allocation,
  synchronize, free, destroy.

Before each driver call it prints ``@@STEP@@<call>`` (so a parent that kills a
hung child knows where it hung); the verdict is one ``@@DFLASH@@`` line
(host/runner.py): ok, step, error, cuda_driver_version, devices or the GPU's
name, compute capability, PCI bus id and seconds.
"""

import ctypes
import json
import sys
import time

# cuDeviceGetAttribute: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
_CC_MAJOR, _CC_MINOR = 75, 76


class _Done(Exception):
    """The verdict is written: stop."""


class _Driver:
    def __init__(self, res):
        self.res = res
        self.cu = None

    def emit(self):
        sys.stdout.write("\n@@DFLASH@@" + json.dumps(self.res) + "\n")
        sys.stdout.flush()

    def error_name(self, rc):
        p = ctypes.c_char_p()
        try:
            if self.cu.cuGetErrorName(rc, ctypes.byref(p)) == 0 and p.value:
                return p.value.decode()
        except Exception:  # an old driver without cuGetErrorName: the number is the name
            pass
        return "CUresult %d" % rc

    def call(self, step, fn, *args):
        self.res["step"] = step
        sys.stdout.write("@@STEP@@%s\n" % step)
        sys.stdout.flush()
        rc = fn(*args)
        if rc != 0:
            self.res["error"] = self.error_name(rc)
            self.emit()
            raise _Done()

    def describe(self, i):
        cu = self.cu
        d = ctypes.c_int()
        self.call("cuDeviceGet", cu.cuDeviceGet, ctypes.byref(d), i)
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", cu.cuDeviceGetName, buf, 256, d)
        ma, mi = ctypes.c_int(), ctypes.c_int()
        self.call("cuDeviceGetAttribute", cu.cuDeviceGetAttribute, ctypes.byref(ma), _CC_MAJOR, d)
        self.call("cuDeviceGetAttribute", cu.cuDeviceGetAttribute, ctypes.byref(mi), _CC_MINOR, d)
        pci = ctypes.create_string_buffer(64)
        bus = None
        if cu.cuDeviceGetPCIBusId(pci, 64, d) == 0:
            bus = pci.value.decode()
        return d, {"name": buf.value.decode(), "compute_capability": "%d.%d" % (ma.value, mi.value),
                   "pci_bus_id": bus}

    def run(self, mode):
        res = self.res
        try:
            self.cu = cu = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            res["error"] = str(e)
            self.emit()
            return
        v = ctypes.c_int()
        cu.cuDriverGetVersion(ctypes.byref(v))
        res["cuda_driver_version"] = "%d.%d" % (v.value // 1000, v.value % 1000 // 10)
        self.call("cuInit", cu.cuInit, 0)
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", cu.cuDeviceGetCount, ctypes.byref(n))
        if mode == "list":
            res["devices"] = [self.describe(i)[1] for i in range(n.value)]
            res["ok"] = True
            res["step"] = "done"
            self.emit()
            return
        t0 = time.monotonic()
        dev, info = self.describe(0)
        res.update(info)
        ctx = ctypes.c_void_p()
        self.call("cuCtxCreate", cu.cuCtxCreate_v2, ctypes.byref(ctx), 0, dev)
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc", cu.cuMemAlloc_v2, ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
        self.call("cuCtxSynchronize", cu.cuCtxSynchronize)
        self.call("cuMemFree", cu.cuMemFree_v2, ptr)
        self.call("cuCtxDestroy", cu.cuCtxDestroy_v2, ctx)
        res["ok"] = True
        res["step"] = "done"
        res["seconds"] = round(time.monotonic() - t0, 3)
        self.emit()


def main(mode):
    try:
        _Driver({"ok": False, "step": "load libcuda.so.1"}).run(mode)
    except _Done:
        pass


if __name__ == "__main__":
    main(sys.argv[1])
