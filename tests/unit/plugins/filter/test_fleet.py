"""fleet_hold_back: a batch of a rolling deploy starts only while earlier failures are within bounds."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "dflash_fleet_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "fleet.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

ALL = ["h1", "h2", "h3", "h4", "h5"]


def test_the_first_batch_always_starts():
    assert mod.fleet_hold_back(ALL, ALL, ["h1", "h2"], [], 0) == ""


def test_no_failure_so_far_lets_the_batch_start():
    assert mod.fleet_hold_back(ALL, ALL, ["h3", "h4"], [], 0) == ""


def test_one_failure_in_a_partly_failed_batch_holds_back_the_next():
    # serial 2: h1 failed, h2 finished; Ansible keeps h1 out of ansible_play_hosts.
    msg = mod.fleet_hold_back(ALL, ["h2", "h3", "h4", "h5"], ["h3", "h4"], [], 0)
    assert msg == ("not deployed: h1 failed in an earlier batch (1 of 2 hosts tried, 50% > "
                   "deploy_dflash_max_fail_percentage 0%); fix the failure and run the same command again")


def test_the_percentage_is_more_than_not_at_least():
    play = ["h2", "h3", "h4", "h5"]
    assert mod.fleet_hold_back(ALL, play, ["h3", "h4"], [], 50) == ""       # 50% is not more than 50%
    assert mod.fleet_hold_back(ALL, play, ["h3", "h4"], [], 49) != ""
    assert mod.fleet_hold_back(ALL, play, ["h3", "h4"], [], "50") == ""     # -e gives a string


def test_failures_are_counted_over_every_earlier_batch():
    # serial 2, 50%: h1 failed in batch 1, h3 in batch 2: 2 of 4 = 50%, h5 starts; a third failure stops it.
    assert mod.fleet_hold_back(ALL, ["h2", "h4", "h5"], ["h5"], [], 50) == ""
    msg = mod.fleet_hold_back(ALL, ["h2", "h5"], ["h5"], [], 50)
    assert msg.startswith("not deployed: h1, h3, h4 failed in an earlier batch (3 of 4 hosts tried, 75% >")


def test_a_held_back_batch_holds_back_every_later_one_for_the_same_reason():
    # serial 1: h1 failed; h2 was held back (so it is out of ansible_play_hosts too, but not a failure).
    first = mod.fleet_hold_back(ALL, ["h3", "h4", "h5"], ["h2"], [], 0)
    later = mod.fleet_hold_back(ALL, ["h3", "h4", "h5"], ["h3"], ["h2"], 0)
    assert first == later and first.startswith("not deployed: h1 failed in an earlier batch (1 of 1 hosts tried")


def test_one_hundred_percent_never_stops():
    assert mod.fleet_hold_back(ALL, ["h5"], ["h5"], [], 100) == ""


@pytest.mark.parametrize("bad", ["abc", None, -1, 101])
def test_a_percentage_that_is_not_one_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="deploy_dflash_max_fail_percentage .* give 0-100"):
        mod.fleet_hold_back(ALL, ["h2"], ["h3"], [], bad)


def test_a_batch_outside_the_play_has_nothing_before_it():
    assert mod.tried_before(ALL, []) == []
    assert mod.tried_before(ALL, ["x"]) == []
    assert mod.tried_before(ALL, ["h3"]) == ["h1", "h2"]
