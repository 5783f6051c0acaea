# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unsatisfied requirements, pip-check style.

Specifiers and markers (PEP 440/508) are evaluated by ``packaging`` when it
imports here, else by ``uv pip check``; never by a hand-written parser.  When
neither is available the result says so instead of guessing.

The rules are pip's (``pip check``): a requirement whose marker is false for
this host and the venv's Python, or that sits behind an extra (markers are
evaluated with ``extra`` empty, as for a distribution installed without
extras), is not checked; any other must be installed in a version its
specifier contains, pre-releases included.  tests/unit compares the result
with pip's own check on real venvs.
"""

from __future__ import annotations

import re
import traceback

try:
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version
    HAS_PACKAGING = True
    PACKAGING_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - depends on the host
    HAS_PACKAGING = False
    PACKAGING_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import run_with_timeout
from ansible_collections.dflash.deploy.plugins.module_utils.host.unprivileged import as_user, user_env
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import normalize_name


def marker_environment(python_version=None):
    """packaging's marker environment for this host, with the venv's Python version."""
    env = dict(default_environment())
    if python_version:
        parts = python_version.split(".")
        env["python_version"] = ".".join(parts[:2])
        env["python_full_version"] = python_version
        env["implementation_version"] = python_version
    env["extra"] = ""
    return env


def requirement_name(text):
    """The distribution name a requirement string names (packaging's reading)."""
    return Requirement(text).name


def check_with_packaging(dists, python_version=None):
    """List of unsatisfied requirements over ``dists`` (normalized name -> dict from distributions.scan)."""
    env = marker_environment(python_version)
    installed = {}  # normalized name -> version ("" when its METADATA has none: installed all the same)
    for key, dist in dists.items():
        installed.setdefault(key.split("#", 1)[0], dist["version"] or "")
    out = []
    for _key, dist in sorted(dists.items()):
        for text in dist.get("requires", ()):
            try:
                req = Requirement(text)
            except InvalidRequirement as exc:
                out.append({"distribution": dist["name"], "version": dist["version"], "requirement": text,
                            "installed": None, "problem": "invalid requirement: %s" % exc})
                continue
            if req.marker is not None:
                try:
                    if not req.marker.evaluate(env):
                        continue
                except Exception as exc:  # undefined marker variables and the like
                    out.append({"distribution": dist["name"], "version": dist["version"], "requirement": text,
                                "installed": None, "problem": "marker not evaluable: %s" % exc})
                    continue
            have = installed.get(normalize_name(req.name))
            if have is None:
                out.append({"distribution": dist["name"], "version": dist["version"], "requirement": str(req),
                            "installed": None, "problem": "missing"})
                continue
            if not req.specifier:
                continue
            if not have:
                out.append({"distribution": dist["name"], "version": dist["version"], "requirement": str(req),
                            "installed": None, "problem": "installed without a version: %s cannot be checked"
                                                          % req.specifier})
                continue
            if not _satisfies(req.specifier, have):
                out.append({"distribution": dist["name"], "version": dist["version"], "requirement": str(req),
                            "installed": have, "problem": "conflict"})
    return out


def _satisfies(specifier, have):
    """Whether version text ``have`` is in ``specifier``, pre-releases included, on every ``packaging`` >= 22.

    A version that is not PEP 440 is compared as text: packaging 26 lets ``===`` match it and nothing else;
    packaging 22-25 raise InvalidVersion for it instead (Debian 12 ships 23, Ubuntu 24.04 ships 24), which
    is taken as not contained, so the verdict is "conflict" whichever the host has.
    """
    try:
        return specifier.contains(Version(have), prereleases=True)
    except InvalidVersion:
        pass
    try:
        return specifier.contains(have, prereleases=True)
    except InvalidVersion:
        return False


_UV_CONFLICT = re.compile(r"The package `([^`]+)` requires `([^`]+)`, but `([^`]+)` is installed")
_UV_MISSING = re.compile(r"The package `([^`]+)` requires `([^`]+)`, but it's not installed")


def parse_uv_check(text, dists):
    versions = dict((normalize_name(d["name"]), d["version"]) for d in dists.values())
    out = []
    for line in text.splitlines():
        m = _UV_CONFLICT.search(line)
        if m:
            out.append({"distribution": m.group(1), "version": versions.get(normalize_name(m.group(1))),
                        "requirement": m.group(2), "installed": m.group(3), "problem": "conflict"})
            continue
        m = _UV_MISSING.search(line)
        if m:
            out.append({"distribution": m.group(1), "version": versions.get(normalize_name(m.group(1))),
                        "requirement": m.group(2), "installed": None, "problem": "missing"})
    return out


def check_with_uv(uv, python, dists, timeout=60, user=None):
    """(unsatisfied list, error or None) from ``uv pip check --python <python>`` (uv runs the interpreter:
    with ``user``, as that user, uv's cache off)."""
    argv, extra = [uv, "pip", "check", "--python", python], {}
    if user:
        argv, extra = as_user(user, argv), {"env": dict(user_env(user), UV_NO_CACHE="1"), "cwd": "/"}
    rc, text, err, timed_out = run_with_timeout(argv, timeout, merge_stderr=True, **extra)
    if rc is None:
        return [], "uv pip check could not run: %s" % err
    if timed_out:
        return [], "uv pip check could not run: timed out after %ss" % timeout
    found = parse_uv_check(text, dists)
    if rc not in (0, 1) or (rc == 1 and not found and "requires" not in text):
        last = (text.strip().splitlines() or ["no output"])[-1]
        return found, "uv pip check failed (rc %d): %s" % (rc, last)
    return found, None


def check(dists, python_version=None, uv=None, python=None, user=None):
    """dict: method ('packaging'|'uv'|None), unsatisfied (list), error (str or None)."""
    if HAS_PACKAGING:
        return {"method": "packaging", "unsatisfied": check_with_packaging(dists, python_version), "error": None}
    if uv and python:
        found, err = check_with_uv(uv, python, dists, user=user)
        return {"method": "uv", "unsatisfied": found, "error": err}
    return {"method": None, "unsatisfied": [],
            "error": "requirements not checked: the Python package 'packaging' is not importable by the module's "
                     "interpreter and uv was not found"}
