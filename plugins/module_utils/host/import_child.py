# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The import test's child: imports one module in the venv's interpreter and reports.

Runs as ``python -c <this file's text> <module name>`` (host/imports.py sends
it); standard library only, nothing from the collection. The report is one
``@@DFLASH@@`` line (host/runner.py): ok, version, error, seconds.
"""

import importlib
import json
import sys
import time


def main(name):
    t0 = time.monotonic()
    try:
        m = importlib.import_module(name)
        v = getattr(m, "__version__", None)
        res = {"ok": True, "version": None if v is None else str(v)}
    except BaseException as e:  # anything the import raises, SystemExit included, is the verdict
        text = " | ".join(line.strip() for line in str(e).splitlines() if line.strip())
        res = {"ok": False, "error": "%s: %s" % (type(e).__name__, text[:2000])}
    res["seconds"] = round(time.monotonic() - t0, 3)
    sys.stdout.write("\n@@DFLASH@@" + json.dumps(res) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
