# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a virtual environment keeps its interpreter and site-packages, read
from its files (pyvenv.cfg, bin/python, lib/pythonX.Y/site-packages).

One reader, ``read_venv``, finds these; two verdicts use it.  ``open_venv``
is strict and refuses anything that is not a whole venv
(site_packages_transplant writes into it); ``locate`` is lenient and
describes what is there (pkg_probe and abi_check report on any venv, even a
damaged one).
"""

from __future__ import annotations

import os
import re

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_text

_LIBDIR = re.compile(r"^python(\d+)\.(\d+)(t?)$")


class VenvError(ValueError):
    """A path that is not a usable venv; ``kind`` is venv_missing, not_a_venv or unreadable."""

    def __init__(self, kind, path, detail):
        super(VenvError, self).__init__(detail)
        self.kind = kind
        self.path = path
        self.detail = detail


def read_pyvenv_cfg(venv):
    """pyvenv.cfg as {lower-cased key: value}, or None when it cannot be read."""
    cfg = {}
    try:
        for line in read_text(os.path.join(venv, "pyvenv.cfg"), 1 << 20).splitlines():  # a regular file only
            key, sep, value = line.partition("=")
            if sep:
                cfg[key.strip().lower()] = value.strip()
    except OSError:
        return None
    return cfg


class Venv:
    """What a venv's files say: root, bin/, interpreter, site-packages and the Python version."""

    def __init__(self, root, cfg, interpreter, site_packages, version, freethreaded=False):
        self.root = root
        self.cfg = cfg  # pyvenv.cfg as a dict; None when it cannot be read
        self.bin = os.path.join(root, "bin")
        self.interpreter = interpreter  # bin/python or bin/python3 where one exists (maybe a broken link), else None
        self.site_packages = site_packages  # None when there is none
        self.version = version  # (major, minor) of the site-packages directory, or None
        self.freethreaded = freethreaded

    @property
    def python(self):
        return os.path.join(self.bin, "python")

    @property
    def python_version(self):
        """pyvenv.cfg's version_info (or version), else X.Y from the site-packages directory, else None."""
        stated = (self.cfg or {}).get("version_info") or (self.cfg or {}).get("version")
        if stated:
            return stated
        return "%d.%d" % self.version if self.version else None


def _site_packages_dirs(root, lib, with_links):
    """(version, freethreaded, site-packages) of every lib/pythonX.Y[t]/site-packages, by directory name."""
    libdir = os.path.join(root, lib)
    try:
        names = sorted(os.listdir(libdir))
    except OSError:
        return []
    found = []
    for name in names:
        match = _LIBDIR.match(name)
        sp = os.path.join(libdir, name, "site-packages")
        if match and os.path.isdir(sp) and (with_links or not os.path.islink(os.path.join(libdir, name))):
            found.append(((int(match.group(1)), int(match.group(2))), bool(match.group(3)), sp))
    return found


def read_venv(root, lenient=False):
    """The venv facts of the directory ``root``, without a verdict (a Venv; site_packages None when none).

    Of several lib/pythonX.Y/site-packages, the one of the version pyvenv.cfg
    names is chosen, else the last by name.  ``lenient`` also counts a
    linked lib/pythonX.Y and falls back to lib64/.
    """
    cfg = read_pyvenv_cfg(root)
    interpreter = None
    for name in ("python", "python3"):
        cand = os.path.join(root, "bin", name)
        if os.path.lexists(cand):
            interpreter = cand
            break
    candidates = _site_packages_dirs(root, "lib", lenient)
    if not candidates and lenient:
        candidates = _site_packages_dirs(root, "lib64", lenient)
    if not candidates:
        return Venv(root, cfg, interpreter, None, None)
    wanted = (cfg or {}).get("version_info") or (cfg or {}).get("version") or ""
    chosen = candidates[-1]
    if len(candidates) > 1:
        for cand in candidates:
            if wanted.startswith("%d.%d." % cand[0]):
                chosen = cand
    return Venv(root, cfg, interpreter, chosen[2], chosen[0], chosen[1])


def open_venv(root):
    """The whole venv at ``root`` (a Venv), or raise VenvError saying why it is not one."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise VenvError("venv_missing", root, "%s does not exist or is not a directory" % root)
    venv = read_venv(root)
    if venv.cfg is None:
        raise VenvError("not_a_venv", root, "%s is not a virtual environment (no readable pyvenv.cfg)" % root)
    if venv.site_packages is None:
        raise VenvError("not_a_venv", root, "%s is not a virtual environment (no lib/pythonX.Y/site-packages)" % root)
    _check_no_links(venv)
    return venv


def _check_no_links(venv):
    """Refuse a venv whose lib/, site-packages or bin/ is a symbolic link.

    Everything the transplant writes must stay inside the venv; a linked
    top-level directory would carry the whole run (scripts, site-packages)
    wherever it points.
    """
    for path in (os.path.join(venv.root, "lib"), venv.site_packages, venv.bin):
        if os.path.islink(path):
            raise VenvError("not_a_venv", venv.root, "%s is a symbolic link (to %s); refusing: the venv's own "
                            "directories must be real directories inside it" % (path, os.readlink(path)))


def locate(venv):
    """What there is of the venv at ``venv``, as a dict: venv, python (executable path), python_exists,
    python_version, site_packages, pyvenv_cfg.

    Raises VenvError only when there is no venv to describe: a missing path, or
    one with no site-packages (or neither pyvenv.cfg nor an interpreter).
    """
    if not os.path.exists(venv):
        raise VenvError("venv_missing", venv, "venv %s does not exist" % venv)
    if not os.path.isdir(venv):
        raise VenvError("not_a_venv", venv, "%s is not a directory, so not a venv" % venv)
    found = read_venv(venv, lenient=True)
    python = found.interpreter
    if found.cfg is None and (python is None or found.site_packages is None):
        raise VenvError("not_a_venv", venv,
                        "%s is not a venv: no pyvenv.cfg, bin/python or lib/python3*/site-packages" % venv)
    if found.site_packages is None:
        raise VenvError("not_a_venv", venv, "%s has no lib/python3*/site-packages" % venv)
    return {
        "venv": venv,
        "python": python,
        "python_exists": python is not None and os.path.exists(python),
        "python_version": found.python_version,
        "site_packages": found.site_packages,
        "pyvenv_cfg": found.cfg or {},
    }
