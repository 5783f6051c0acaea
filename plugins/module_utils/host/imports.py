# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import named modules with a venv's interpreter: one subprocess each, in
parallel, each with a timeout, in the environment the service will have."""

from __future__ import annotations

import os
import time

from ansible_collections.dflash.deploy.plugins.module_utils.host import import_child
from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import (
    child_source,
    fan_out,
    parse_report,
    run_with_timeout,
)
from ansible_collections.dflash.deploy.plugins.module_utils.host.unprivileged import as_user


def check_environment(environment):
    """None when every name and value can go into a process environment, else the reason (one line)."""
    for key, value in (environment or {}).items():
        key = str(key)
        if not key or "=" in key or "\x00" in key:
            return "environment: name %r is not a valid variable name (empty, or holds '=' or a NUL byte)" % key
        if value is not None and "\x00" in str(value):
            return "environment: the value of %s holds a NUL byte, which no process environment can carry" % key
    return None


def check_timeouts(**timeouts):
    """None when every timeout is a positive number of seconds, else the reason."""
    for name, value in sorted(timeouts.items()):
        if value is not None and value <= 0:
            return "%s must be a positive number of seconds, not %s" % (name, value)
    return None


def service_env(environment=None, base=None):
    env = dict(os.environ if base is None else base)
    for k, v in (environment or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[str(k)] = str(v)
    return env


def import_one(python, name, timeout=120, env=None, user=None):
    """One import in its own interpreter; with ``user``, run as that user (setpriv) from ``/``."""
    t0 = time.monotonic()
    argv = [python, "-c", child_source(import_child), name]
    if user:
        argv = as_user(user, argv)
    extra = {"cwd": "/"} if user else {}  # the module's working directory may be root's alone
    rc, stdout, stderr, timed_out = run_with_timeout(argv, timeout, env, **extra)
    wall = round(time.monotonic() - t0, 3)
    if timed_out:
        return {"ok": False, "version": None, "seconds": wall, "error": "timed out after %ss" % timeout}
    res = parse_report(stdout)
    if res is not None:
        res.setdefault("version", None)
        res.setdefault("error", None)
        res["seconds"] = wall
        return res
    if rc is None:  # never started: a missing interpreter or a broken link (the venv's bin/python)
        return {"ok": False, "version": None, "seconds": wall,
                "error": "could not start the interpreter %s: %s" % (python, stderr)}
    last = (stderr.strip().splitlines() or ["no output"])[-1]
    return {"ok": False, "version": None, "seconds": wall,
            "error": "interpreter exited with rc %s before reporting: %s" % (rc, last)}


def default_workers(cpus=None):
    """How many imports run at once: half the host's CPUs, at least 4 and at most 16. Each import is one
    interpreter's cold start (torch and sglang: seconds of CPU), so a GPU host's cores take the whole list in
    one round, and a small host is not asked for more than it was before."""
    return max(4, min(16, (cpus or os.cpu_count() or 1) // 2))


def import_many(python, names, timeout=120, env=None, workers=None, user=None):
    if user:
        as_user(user, [])  # an unknown user, uid 0 or no setpriv: refused once, before any import
    return fan_out(lambda n: import_one(python, n, timeout, env, user), dict.fromkeys(names),
                   workers or default_workers())
