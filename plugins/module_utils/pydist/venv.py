# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a virtual environment keeps its interpreter and site-packages, read
from its files (pyvenv.cfg, lib/pythonX.Y/site-packages).

Two readers for two needs: ``locate`` is lenient and describes what is there
(pkg_probe and abi_check report on any venv, even a damaged one);
``open_venv`` is strict and refuses anything that is not a whole venv
(site_packages_transplant writes into it).
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_text

_LIBDIR = re.compile(r"^python(\d+)\.(\d+)(t?)$")


class VenvError(ValueError):
    """A path that is not a usable venv; ``kind`` is venv_missing or not_a_venv."""

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


def locate(venv):
    """dict: venv, python (executable path), python_version, site_packages, pyvenv_cfg.

    Raises VenvError with a message that says what is wrong.
    """
    if not os.path.exists(venv):
        raise VenvError("venv_missing", venv, "venv %s does not exist" % venv)
    if not os.path.isdir(venv):
        raise VenvError("not_a_venv", venv, "%s is not a directory, so not a venv" % venv)
    cfg = read_pyvenv_cfg(venv)
    python = None
    for name in ("python", "python3"):
        cand = os.path.join(venv, "bin", name)
        if os.path.lexists(cand):
            python = cand
            break
    sp = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    if not sp:
        sp = sorted(glob.glob(os.path.join(venv, "lib64", "python3*", "site-packages")))
    if cfg is None and (python is None or not sp):
        raise VenvError("not_a_venv", venv,
                        "%s is not a venv: no pyvenv.cfg, bin/python or lib/python3*/site-packages" % venv)
    if not sp:
        raise VenvError("not_a_venv", venv, "%s has no lib/python3*/site-packages" % venv)
    version = None
    if cfg:
        version = cfg.get("version_info") or cfg.get("version")
    site_packages = sp[-1]
    if not version:
        m = re.search(r"python(\d+\.\d+)", site_packages)
        version = m.group(1) if m else None
    broken = python is not None and not os.path.exists(python)
    return {
        "venv": venv,
        "python": python,
        "python_exists": python is not None and not broken,
        "python_version": version,
        "site_packages": site_packages,
        "pyvenv_cfg": cfg or {},
    }


class Venv:
    """Paths of a venv: root, bin/, site-packages, and the Python version."""

    def __init__(self, root, site_packages, version, freethreaded=False):
        self.root = root
        self.site_packages = site_packages
        self.bin = os.path.join(root, "bin")
        self.version = version  # (major, minor)
        self.freethreaded = freethreaded

    @property
    def python(self):
        return os.path.join(self.bin, "python")


def open_venv(root):
    """Describe the venv at ``root`` or raise VenvError saying why it is not one."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise VenvError("venv_missing", root, "%s does not exist or is not a directory" % root)
    cfg = read_pyvenv_cfg(root)
    if cfg is None:
        raise VenvError("not_a_venv", root, "%s is not a virtual environment (no readable pyvenv.cfg)" % root)
    libdir = os.path.join(root, "lib")
    candidates = []
    try:
        names = sorted(os.listdir(libdir))
    except OSError:
        names = []
    for name in names:
        match = _LIBDIR.match(name)
        sp = os.path.join(libdir, name, "site-packages")
        if match and os.path.isdir(sp) and not os.path.islink(os.path.join(libdir, name)):
            candidates.append(((int(match.group(1)), int(match.group(2))), bool(match.group(3)), sp))
    if not candidates:
        raise VenvError("not_a_venv", root, "%s is not a virtual environment (no lib/pythonX.Y/site-packages)" % root)
    wanted = cfg.get("version_info") or cfg.get("version") or ""
    chosen = candidates[-1]
    if len(candidates) > 1:
        for cand in candidates:
            if wanted.startswith("%d.%d." % cand[0]):
                chosen = cand
    venv = Venv(root, chosen[2], chosen[0], chosen[1])
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
