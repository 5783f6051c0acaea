# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one step of the check found wrong with one ELF file, and how files are named in findings.

A step answers its question with ``Problem`` values: the finding kind, the one-line detail and
the fix.  The file's own check (file_check.py) places them: the file's path and when it loads
(loadplan) give every problem its finding's ``path``, ``severity`` and ``load``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F


@dataclass(frozen=True)
class Problem:
    """``kind`` and ``detail`` of a finding (findings.KINDS), the ``fix`` a person would take,
    ``severity`` when the problem decides its own (else the file's, by when it loads) and ``extra``:
    the finding's further fields, as (key, value) pairs in the order they are reported."""

    kind: str
    detail: str
    fix: str | None = None
    severity: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    def finding(self, path, severity, load):
        """The finding dict for the file named ``path`` whose problems are ``severity`` when it loads at ``load``."""
        return F.make(self.kind, path, self.detail, self.severity or severity, load=load, fix=self.fix,
                      **dict(self.extra))


def short_path(path, site):
    """``path`` relative to site-packages when it lies inside it, else as given (how findings name files)."""
    try:
        rel = os.path.relpath(path, site)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
