# -*- coding: utf-8 -*-
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Locate a virtual environment's interpreter and site-packages from its files."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import glob
import os
import re


class VenvError(ValueError):
    """A path that is not a usable venv; ``kind`` is venv_missing or not_a_venv."""

    def __init__(self, kind, path, detail):
        super(VenvError, self).__init__(detail)
        self.kind = kind
        self.path = path
        self.detail = detail


def read_pyvenv_cfg(venv):
    cfg = {}
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), "r", errors="replace") as fh:
            for line in fh:
                if "=" in line:
                    k, v = line.split("=", 1)
                    cfg[k.strip()] = v.strip()
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
