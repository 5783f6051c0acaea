# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start sglang-router's launch_router with its control-plane key off the command line.

The unit runs ``<router venv>/bin/python -I <base>/bin/sglang-router-launch <launch_router arguments>``
with ``SGLANG_ROUTER_CONTROL_PLANE_API_KEY`` from the router's env file (``/etc/dflash/router/<model>.env``,
0640 root:<service group>). sglang-router 0.3.2 takes control-plane keys only as ``--control-plane-api-keys
id:name:role:key``; the key joins the arguments here, inside the interpreter, so that the process's command
line (``/proc/<pid>/cmdline``, which every local user reads) does not carry it, and it is taken out of the
environment before the router starts. Without a key the router is not started: its worker API would be open.
"""
from __future__ import annotations

import os
import sys

KEY_VAR = "SGLANG_ROUTER_CONTROL_PLANE_API_KEY"
KEY_ID = "dflash-deploy"
KEY_NAME = "dflash.deploy"


def arguments(argv, environ):
    """launch_router's arguments: ``argv`` and the control-plane key (admin) from ``environ``, which loses it.
    SystemExit, in one line without the key, when there is none."""
    key = environ.pop(KEY_VAR, "")
    if not key or any(c.isspace() for c in key):
        raise SystemExit("sglang-router-launch: no usable %s in the environment (the router's env file, "
                         "<config_dir>/router/<model>.env): the router is not started with an open worker API"
                         % KEY_VAR)
    return list(argv) + ["--control-plane-api-keys", "%s:%s:admin:%s" % (KEY_ID, KEY_NAME, key)]


def main(argv=None, environ=None):
    args = arguments(sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ)
    from sglang_router.launch_router import launch_router, parse_router_args

    launch_router(parse_router_args(args))


if __name__ == "__main__":
    main()
