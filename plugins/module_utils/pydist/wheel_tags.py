# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does an installed distribution's wheel tag fit the destination interpreter?

The ``Tag:`` lines of a dist-info ``WHEEL`` file (``cp311-cp311-linux_x86_64``,
``cp39-abi3-manylinux_2_28_x86_64``, ``py3-none-any``) say which CPython ABI
and platform the files were built for.  A distribution copied into a venv of
another Python ABI would install cleanly and then fail at import, so the
transplant refuses it up front.  Standard library only.
"""


import platform
import re

_CP = re.compile(r"^cp(\d)(\d+)$")
_PY = re.compile(r"^py(\d)(\d*)$")
_ABI_CP = re.compile(r"^cp(\d)(\d+)([dmu]*)(t?)$")
_LINUX_PLATFORM = re.compile(r"^(?:many|musl)?linux(?:1|2010|2014|_\d+_\d+)?_(.+)$")


def expand_tag(tag):
    """``py2.py3-none-any`` -> [(py2, none, any), (py3, none, any)]."""
    parts = tag.split("-")
    if len(parts) != 3:
        return []
    return [(i, a, p) for i in parts[0].split(".") for a in parts[1].split(".") for p in parts[2].split(".")]


def _python_ok(interp, abi, version, freethreaded):
    major, minor = version
    match = _PY.match(interp)
    if match:
        if int(match.group(1)) != major:
            return False
        return abi in ("none",) or _abi_ok(abi, version, freethreaded, allow_abi3=True)
    match = _CP.match(interp)
    if not match or int(match.group(1)) != major:
        return False
    tag_minor = int(match.group(2))
    if abi == "abi3":
        return tag_minor <= minor and not freethreaded
    if abi == "none":
        return tag_minor <= minor
    return tag_minor == minor and _abi_ok(abi, version, freethreaded, allow_abi3=False)


def _abi_ok(abi, version, freethreaded, allow_abi3):
    if abi == "abi3":
        return allow_abi3 and not freethreaded
    match = _ABI_CP.match(abi)
    if not match:
        return False
    return (int(match.group(1)), int(match.group(2))) == tuple(version) and bool(match.group(4)) == freethreaded


def _platform_ok(plat, machine):
    if plat == "any":
        return True
    match = _LINUX_PLATFORM.match(plat)
    return bool(match) and match.group(1) == machine


def tag_compatible(tag, version, freethreaded=False, machine=None):
    """True when one expansion of ``tag`` runs on CPython ``version`` here."""
    machine = machine or platform.machine()
    for interp, abi, plat in expand_tag(tag):
        if _python_ok(interp, abi, tuple(version), freethreaded) and _platform_ok(plat, machine):
            return True
    return False


def check_tags(tags, version, freethreaded=False, machine=None):
    """None when compatible (or no tags known), else a one-line reason."""
    if not tags:
        return None
    if any(tag_compatible(t, version, freethreaded, machine) for t in tags):
        return None
    want = "cp%d%d%s" % (version[0], version[1], "t" if freethreaded else "")
    return "built for %s, but the destination is CPython %d.%d%s (%s) on %s" % (
        ", ".join(tags), version[0], version[1], " free-threaded" if freethreaded else "", want,
        machine or platform.machine())
