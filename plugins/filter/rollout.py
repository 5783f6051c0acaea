# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin filters over the rollout's decisions (plugins/plugin_utils/rollout.py, where each is documented and
tested):

    {{ _sglang_service_present | dflash.deploy.rollout_restart_set(changed=..., current=..., active=...,
         release_dir=..., reverified=..., whole_unit=..., started_before=...) }}  ->  ["a", "b"]
    {{ _sglang_service_present | dflash.deploy.rollout_restart_waves(names, enabled) }}  ->  [["a", "c"], ["b"]]
    {{ _sglang_service_present | dflash.deploy.rollout_wave_plan(names, enabled, active) }}
      ->  [{restart, waited, earlier, later, serving, surge, drain}, ...]
    {{ waves | dflash.deploy.rollout_waves_line }}  ->  "restart in 2 waves, ..." or ""
"""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.plugin_utils.rollout import (
    restart_set,
    restart_waves,
    wave_plan,
    waves_line,
)


class FilterModule:
    def filters(self):
        return {
            "rollout_restart_set": restart_set,
            "rollout_restart_waves": restart_waves,
            "rollout_wave_plan": wave_plan,
            "rollout_waves_line": waves_line,
        }
