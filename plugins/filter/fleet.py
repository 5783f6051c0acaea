# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet_hold_back: should this batch of a rolling deploy start at all?

    {{ ansible_play_hosts_all | dflash.deploy.fleet_hold_back(ansible_play_hosts, ansible_play_batch,
                                                              held, deploy_dflash_max_fail_percentage) }}
      ->  ''  (go on)  or one line that says why the batch is held back

Ansible's own `max_fail_percentage` never counts a host whose failure ran through a block's
`always:` (the host lock is released there), so with `serial` of 2 or more a failed batch
did not stop the next one. The playbook therefore decides at the start of every batch,
from Ansible's own host lists:

- the hosts tried so far are those before the batch's first host in the play's order
  (batches are cut from ansible_play_hosts_all in order);
- the failed ones are those no longer in ansible_play_hosts (Ansible drops failed and
  unreachable hosts from it for the rest of the play);
- hosts this decision held back earlier are neither tried nor failed, so the hosts tried and
  failed stay as they were: once a batch is held back, every later one is, for the same reason.

The batch is held back when the failed hosts are more than max_fail_percentage percent of
the hosts tried (Ansible's own rule for the keyword: "more than"); 0 stops at the first
failure, 100 never stops.
"""
from __future__ import annotations


def _percent(value) -> float:
    try:
        pct = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"deploy_dflash_max_fail_percentage {value!r} is not a number: give 0-100") from None
    if not 0 <= pct <= 100:
        raise ValueError(f"deploy_dflash_max_fail_percentage {value!r} is out of range: give 0-100")
    return pct


def tried_before(play_hosts_all: list, batch: list) -> list:
    """The hosts of earlier batches: those before the batch's first host in the play's order."""
    if not batch or batch[0] not in play_hosts_all:
        return []
    return list(play_hosts_all[:play_hosts_all.index(batch[0])])


def fleet_hold_back(play_hosts_all: list, play_hosts: list, batch: list, held: list, max_fail_percentage=0) -> str:
    """'' when the batch may start, else why it is held back (one line naming the failed hosts)."""
    pct = _percent(max_fail_percentage)
    earlier = tried_before(play_hosts_all, batch)
    tried = [h for h in earlier if h not in held]
    failed = [h for h in tried if h not in play_hosts]
    if not failed:
        return ""
    share = 100.0 * len(failed) / len(tried)
    if share <= pct:
        return ""
    return (f"not deployed: {', '.join(failed)} failed in an earlier batch ({len(failed)} of {len(tried)} "
            f"hosts tried, {share:.0f}% > deploy_dflash_max_fail_percentage {pct:g}%); fix the failure and "
            f"run the same command again")


class FilterModule:
    def filters(self):
        return {"fleet_hold_back": fleet_hold_back}
