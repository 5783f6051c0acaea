# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do the libraries the file will get define the symbol versions it was linked against
(GLIBC_2.38, GLIBCXX_3.4.32, CXXABI_1.3.15, ...)?

The loader checks every .gnu.version_r entry (Verneed) of an object against the .gnu.version_d
(Verdef) of the library that DT_NEEDED name resolved to, and refuses the object when one is
missing (``version `GLIBCXX_3.4.32' not found``), before any symbol is bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import Problem
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError


@dataclass(frozen=True)
class VersionCheck:
    """``newest_needed``: {library: [the newest version needed]} (what a playbook registers); ``problems``."""

    newest_needed: dict
    problems: tuple[Problem, ...] = ()


def version_key(v):
    """Sort key of a version name: its family (GLIBCXX) then the numbers of 3.4.32 (a non-number counts 0)."""
    prefix, _unused, num = v.partition("_")
    return prefix, tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.]", num))


def family(version):
    """GLIBCXX of GLIBCXX_3.4.32."""
    return version.split("_", 1)[0]


def newest_needed(needs):
    """{library: [its newest version needed]} of {library: versions}, libraries without versions left out."""
    return dict((k, sorted(v, key=version_key)[-1:]) for k, v in needs.items() if v)


def missing_versions(versions, defs):
    """The versions needed that the provider does not define, oldest first."""
    return sorted(set(v for v in versions if v not in defs), key=version_key)


def newest_defined(defs, of_family):
    """The newest version of the family ``of_family`` the provider defines, or 'none'."""
    have = sorted((d for d in defs if family(d) == of_family), key=version_key)
    return have[-1] if have else "none"


def symbol_versions(process, elf, short, resolved):
    """Check each library's needed versions against the Verdef of the file it resolved to (``resolved``:
    {DT_NEEDED name: path}); a library not found or whose versions cannot be read is left to the other
    steps."""
    problems = []
    try:
        needs = elf.version_needs()
    except (ElfError, ValueError, IndexError) as exc:
        needs = {}
        problems.append(Problem("corrupt_elf", "%s: cannot read .gnu.version_r (%s)" % (short, exc)))
    for lib, versions in sorted(needs.items()):
        provider = resolved.get(lib)
        if not provider:
            continue
        defs = process.version_defs(provider)
        if defs is None:
            continue
        missing = missing_versions(versions, defs)
        if missing:
            problems.append(Problem(
                "glibc_version_missing", "%s needs %s from %s but %s provides up to %s" % (
                    short, missing[-1], lib, provider, newest_defined(defs, family(missing[-1]))),
                fix="use a build made for this host's older C/C++ runtime, or a newer OS image",
                extra=(("versions", missing),)))
    return VersionCheck(newest_needed(needs), tuple(problems))
