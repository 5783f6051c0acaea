# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin filters over the rollout's decisions (plugins/plugin_utils/rollout.py, where each is documented and
tested):

    {{ instances_present | dflash.deploy.rollout_restart_set(changed=..., current=..., active=...,
         release_dir=..., reverified=..., whole_unit=..., started_before=...) }}  ->  ["a", "b"]
    {{ instances_present | dflash.deploy.rollout_restart_waves(names, enabled) }}  ->  [["a", "c"], ["b"]]
    {{ instances_present | dflash.deploy.rollout_wave_plan(names, enabled, active) }}
      ->  [{restart, waited, earlier, later, serving, surge, drain}, ...]
    {{ waves | dflash.deploy.rollout_waves_line }}  ->  "restart in 2 waves, ..." or ""
    {{ ready_results | dflash.deploy.rollout_readiness(refused) }}  ->  {ready: [...], not_ready: [...]}
    {{ ready_results | dflash.deploy.rollout_rollback_order(refused, present, earlier, later) }}
      ->  [{instance, ready_result, was_ready, untouched, refusal}, ...]  (the order they go back in)
    {{ name | dflash.deploy.rollout_rollback_target(release_dir, current, active, previous, previous_exists) }}
      ->  {to: release dir or '', untrusted: [...]}
    {{ name | dflash.deploy.rollout_restore_files(unit, launcher, env, dropin) }}  ->  [{backup_file, dest, ...}]
    {{ unit | dflash.deploy.rollout_outcome(release_dir, rollback_to, restore, untrusted, was_ready, untouched,
         refusal, ready_result, back, exception, abi) }}  ->  {line, serving}
    {{ surge_ready_results | dflash.deploy.rollout_surge_outcome(release_dir) }}  ->  {all_ready, report, failures}
    {{ name | dflash.deploy.rollout_rollback_refusal(previous, current_source, previous_source) }}  ->  '' or why
    {{ current_results | dflash.deploy.rollout_previous_to_check(release_dir) }}  ->  the links to check
    {{ current_results | dflash.deploy.rollout_keep_as_previous(release_dir, trusted, base_dir) }}
      ->  {keep: [{name, target}], not_kept: [{name, line}]}
    {{ restart | dflash.deploy.rollout_switched(current, active, unit, launcher, env, dropin) }}
      ->  {restart, current, active, unit, launcher, env, dropin}  (sglang_service_switched)
"""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.plugin_utils.rollout import (
    keep_as_previous,
    previous_to_check,
    readiness,
    restart_set,
    restart_waves,
    restore_files,
    rollback_order,
    rollback_outcome,
    rollback_refusal,
    rollback_target,
    surge_outcome,
    switched,
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
            "rollout_readiness": readiness,
            "rollout_rollback_order": rollback_order,
            "rollout_rollback_target": rollback_target,
            "rollout_restore_files": restore_files,
            "rollout_outcome": rollback_outcome,
            "rollout_surge_outcome": surge_outcome,
            "rollout_rollback_refusal": rollback_refusal,
            "rollout_previous_to_check": previous_to_check,
            "rollout_keep_as_previous": keep_as_previous,
            "rollout_switched": switched,
        }
