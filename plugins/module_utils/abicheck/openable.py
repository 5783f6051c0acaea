# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Would the loader open this file at all: a readable ELF object of the interpreter's class,
byte order and machine?

Until this answers yes the other steps cannot run; the file's dynamic facts (SONAME, RPATH,
RUNPATH, machine) are reported once it could be read, whatever the architecture.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import Problem
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError

_OPEN_FIXES = {"unreadable": "fix the file's permissions or ownership",
               "not_elf": "reinstall the distribution that owns it",
               "corrupt_elf": "reinstall the distribution that owns it (the file is damaged or truncated)"}


@dataclass(frozen=True)
class Opened:
    """``elf``: the open ElfFile (None when it could not be opened), ``summary``: elf.read_summary's dict
    (None likewise), ``loadable``: whether the other steps may run, ``problems`` in the order met."""

    elf: Any
    summary: dict | None
    loadable: bool
    problems: tuple[Problem, ...] = ()


def broken_symlink(path, short):
    """open(2) of a symlink whose target is gone fails with ENOENT: the loader cannot open it."""
    if os.path.islink(path) and not os.path.exists(path):
        return Problem("broken_symlink", "%s is a symlink to %s, which does not exist" % (short, os.readlink(path)),
                       fix="reinstall the distribution that owns it")
    return None


def unreadable(exc, short):
    """The loader's ``cannot open shared object file`` / ``invalid ELF header`` / ``file too short``: the
    ElfError's kind (unreadable, not_elf, corrupt_elf) and what to do about it."""
    fix = _OPEN_FIXES[exc.kind]
    if "not a regular file" in exc.detail:
        fix = "replace it with the library itself: reinstall the distribution that owns it"
    return Problem(exc.kind, "%s: %s" % (short, exc.detail), fix=fix)


def wrong_architecture(identity, host, short):
    """ld.so refuses an object whose ELF class, byte order (e_ident) or e_machine differ from the
    process's (``wrong ELF class: ELFCLASS32``, elf_machine_matches_host); None when they match."""
    if tuple(identity) == host:
        return None
    return Problem("wrong_architecture",
                   "%s is ELF %d-bit %s-endian %s, but this venv's Python is %d-bit %s-endian %s"
                   % ((short,) + tuple(identity) + host),
                   fix="install the distribution's build for %s (%d-bit)" % (host[2], host[0]))


def without_sections(summary, short):
    """The loader reads program headers only, so a file without section headers (as ``sstrip`` leaves
    it) loads; its symbols and versions cannot be read here (info)."""
    if summary.get("has_sections", True):
        return None
    return Problem("symbols_unchecked", "%s has no section headers (the loader needs none): its symbols and "
                   "versions were not checked" % short, severity=F.INFO)


def dynamic_facts(summary):
    """What a playbook registers of a readable file: SONAME, RPATH, RUNPATH, machine."""
    return {"soname": summary["soname"], "rpath": summary["rpath"], "runpath": summary["runpath"],
            "machine": summary["machine"]}


def open_elf(process, path, short):
    """Open ``path`` as the loader would in ``process``; ``short`` names it in problems."""
    gone = broken_symlink(path, short)
    if gone:
        return Opened(None, None, False, (gone,))
    try:
        elf = process.open(path)
        summary, err = process.resolver.summary(path)
        if summary is None:
            raise err
    except ElfError as exc:
        return Opened(None, None, False, (unreadable(exc, short),))
    refused = wrong_architecture(summary["identity"], process.host_identity(), short)
    if refused:
        return Opened(elf, summary, False, (refused,))
    return Opened(elf, summary, True, tuple(p for p in [without_sections(summary, short)] if p))
