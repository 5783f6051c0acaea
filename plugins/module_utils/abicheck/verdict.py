# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict of a check: its findings in root-cause order, compatible when none is an error, and the
one line naming the root cause and its fix (findings.py)."""

from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F


def judge(result):
    """Sort ``result["findings"]`` and set ``compatible`` and ``msg`` from them; returns ``result``."""
    result["findings"] = F.sort_findings(result["findings"])
    result["compatible"] = not F.errors(result["findings"])
    result["msg"] = F.message(result["findings"])
    return result
