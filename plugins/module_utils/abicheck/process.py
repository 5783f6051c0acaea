# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The process an extension loads into: the venv's interpreter after ``import torch``.

What every step of one check shares: site-packages, the resolver that already holds what
``import torch`` loaded (ldresolve.py), torch's build facts, the GPUs and features the server
uses, the venv's interpreter (the start of the global symbol scope, and the ELF identity the
loader accepts), and the ELF files opened so far (each opened once, all closed at the end).
"""

from __future__ import annotations

import os
import platform
import struct
import sys

from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError, ElfFile


def running_identity():
    """(class bits, byte order, machine) of the Python running this code: the reference when the venv has
    no interpreter to read."""
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    return struct.calcsize("P") * 8, sys.byteorder, machine


class Process:
    """One simulated process: ``site``, ``resolver``, ``torch`` (facts or None), ``gpu_ccs`` (None when
    unknown), ``features`` and the venv's ``python``."""

    def __init__(self, site, resolver, torch, gpu_ccs, features, python=None):
        self.site = site
        self.python = python
        self._interp = None
        self._identity = None
        self.resolver = resolver
        self.torch = torch
        self.gpu_ccs = gpu_ccs
        self.features = features or ()
        self.handles = {}
        self.verdefs = {}

    def interpreter_objects(self):
        """The venv interpreter (and libpython if it links one): the start of the global symbol scope.

        ld.so(8): the executable and its DT_NEEDED come first in the global scope that every
        ``dlopen`` searches; Python's symbols are there, in the binary or in libpython."""
        if self._interp is None:
            self._interp = []
            if self.python and os.path.exists(self.python):
                exe = os.path.realpath(self.python)
                self._interp.append(exe)
                summary, _err = self.resolver.summary(exe)
                for name in (summary or {}).get("needed", ()):
                    if name.startswith("libpython"):
                        found, _via = self.resolver.search(name, summary)
                        if found:
                            self._interp.append(found)
        return self._interp

    def host_identity(self):
        """(class bits, byte order, machine) the venv's interpreter has (the loader's reference)."""
        if self._identity is None:
            identity = None
            if self.python and os.path.exists(self.python):
                summary, _err = self.resolver.summary(os.path.realpath(self.python))
                identity = (summary or {}).get("identity")
            if identity is None:
                identity = running_identity()
            self._identity = tuple(identity)
        return self._identity

    def open(self, path):
        """The ElfFile of ``path``, opened once per check (raises ElfError)."""
        h = self.handles.get(path)
        if h is None:
            h = ElfFile(path)
            self.handles[path] = h
        return h

    def close(self):
        for h in self.handles.values():
            h.close()
        self.handles = {}

    def version_defs(self, path):
        """The version names ``path`` defines (.gnu.version_d), None when they cannot be read."""
        if path not in self.verdefs:
            try:
                self.verdefs[path] = self.open(path).version_defs()
            except ElfError:
                self.verdefs[path] = None
        return self.verdefs[path]
