# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The performance gate's decisions in dflash.deploy.rollout (ready.yml, perf_gate.yml).

    {{ instances | dflash.deploy.perf_gate_errors(settings) }}
      ->  one line per setting the gate cannot use (the role's, or an instance's perf_gate), before any change
    {{ waited | dflash.deploy.perf_gate_requests(settings, gpus, release_dir, current_results, config_dir) }}
      ->  what perf_probe is asked per restarted instance (or why it is not measured)
    {{ requests | dflash.deploy.perf_gate_outcome(probe_results) }}
      ->  {refused: {name: line}, instances: {name: report}, promote: [{name, candidate, record}]}

The gate runs after every instance this run restarted is ready. Each is measured with ``perf_probe``
against the record of the release it ran before the run (the ``current`` that switch.yml read before
the flip), on the cards preflight resolved its GPU indexes to (their UUIDs: figures measured on
other cards are not compared). The record goes to a candidate file of the new release, which
becomes its record only when every restarted instance passed (perf_gate_outcome's ``promote``).

``settings``: ``enabled``, the four limits (``max_ttft_regression``, ``max_itl_regression``,
``max_throughput_regression``, ``min_acceptance_ratio``), ``prompts`` (empty: perf_probe's own),
``max_tokens``, ``warmup``, ``timeout``; an instance's ``perf_gate`` mapping overrides any of them.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dflash.deploy.plugins.module_utils.release import contract

LIMITS = ("max_ttft_regression", "max_itl_regression", "max_throughput_regression", "min_acceptance_ratio")
PROBE = ("prompts", "max_tokens", "warmup", "timeout")
KEYS = ("enabled",) + LIMITS + PROBE

# A report's status besides perf_probe's verdicts (passed, no_baseline, not_comparable, refused).
# One name per assignment: ansible-doc reads this file for the filters' docs and warns on a tuple target
# (ansible-test sanity counts its warning as an error).
OFF = "off"
NOT_MEASURED = "not_measured"
ERROR = "error"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _value_error(key: str, value) -> str | None:
    """Why ``value`` cannot be the gate's ``key``, or None."""
    if key == "enabled":
        return None if isinstance(value, bool) else "is not true or false"
    if key in LIMITS or key == "timeout":
        return None if _number(value) and value >= 0 else "is not a number of at least 0"
    if key == "max_tokens":
        return None if _number(value) and int(value) == value and value >= 2 else "is not a whole number of at least 2"
    if key == "warmup":
        return None if _number(value) and int(value) == value and value >= 0 else "is not a whole number of at least 0"
    if key == "prompts":
        if not isinstance(value, list):
            return "is not a list (of texts or lists of token ids; empty: perf_probe's own)"
        for prompt in value:
            if not ((isinstance(prompt, str) and prompt) or (isinstance(prompt, list) and prompt and all(
                    _number(t) and int(t) == t and t >= 0 for t in prompt))):
                return "holds an item that is neither a non-empty text nor a non-empty list of token ids"
    return None


def perf_gate_errors(instances: list, settings: dict) -> list:
    """One line per gate setting that cannot be used: the role's (``sglang_service_perf_gate_<key>``) and
    each instance's ``perf_gate`` (a mapping of the same keys)."""
    errors = []
    for key in KEYS:
        problem = _value_error(key, (settings or {}).get(key))
        if problem:
            errors.append(f"sglang_service_perf_gate_{key} {problem}")
    for inst in instances or []:
        name = inst.get("name")
        own = inst.get("perf_gate")
        if own is None:
            continue
        if not isinstance(own, dict):
            errors.append(f"instance {name}: perf_gate is a {type(own).__name__}: give a mapping of "
                          f"{', '.join(KEYS)}")
            continue
        for key in sorted(own):
            if key not in KEYS:
                errors.append(f"instance {name}: perf_gate has no setting {key!r} (one of {', '.join(KEYS)})")
                continue
            problem = _value_error(key, own[key])
            if problem:
                errors.append(f"instance {name}: perf_gate {key} {problem}")
    return errors


def _before(current_results: list, name: str) -> str:
    """The release the instance's ``current`` named before this run's switch ('' when none)."""
    for r in current_results or []:
        stat = r.get("stat") or {}
        if (r.get("item") or {}).get("name") == name and stat.get("islnk") and stat.get("lnk_source"):
            return stat["lnk_source"]
    return ""


def _cards(instance: dict, gpus: list) -> tuple:
    """(UUIDs of the instance's GPUs in its order, the indexes whose card is unknown)."""
    by_index = {g.get("index"): g for g in gpus or [] if isinstance(g, dict)}
    uuids, unknown = [], []
    for index in instance.get("gpus") or []:
        uuid = (by_index.get(index) or {}).get("uuid")
        if uuid:
            uuids.append(str(uuid))
        else:
            unknown.append(str(index))
    return uuids, unknown


def perf_gate_requests(waited: list, settings: dict, gpus: list, release_dir: str, current_results: list,
                       config_dir: str) -> list:
    """What perf_probe is asked for each restarted instance: ``measure`` false with a ``reason`` when the
    gate is off for it or its cards are unknown (preflight's GPU facts missing: figures of unnamed cards
    would be no one's baseline)."""
    if not release_dir:
        raise AnsibleFilterError("perf_gate_requests: no release directory (sglang_service_release_dir)")
    out = []
    for inst in waited or []:
        name = inst["name"]
        merged = dict(settings or {}, **(inst.get("perf_gate") or {}))
        before = _before(current_results, name)
        uuids, unknown = _cards(inst, gpus)
        req = {
            "name": name, "port": inst["port"], "env_file": f"{config_dir.rstrip('/')}/{name}.env",
            "release": release_dir.rstrip("/").rsplit("/", 1)[-1], "gpus": uuids,
            "baseline": contract.release_file(before, "perf", name) if before else "",
            "baseline_release": before.rstrip("/").rsplit("/", 1)[-1] if before else "",
            "candidate": contract.release_file(release_dir, "perf_candidate", name),
            "record": contract.release_file(release_dir, "perf", name),
            "prompts": merged.get("prompts") or None,
            **{k: merged.get(k) for k in LIMITS + ("max_tokens", "warmup", "timeout")},
            "measure": True, "reason": "",
        }
        if not merged.get("enabled", True):
            req.update(measure=False, reason="the performance gate is off for this instance")
        elif unknown or not uuids:
            req.update(measure=False, reason=(
                f"not measured: the card behind GPU {', '.join(unknown) or '(none)'} is unknown "
                "(preflight did not run), and figures of unnamed cards are compared with nothing"))
        out.append(req)
    return out


def _report(req: dict, status: str, result: dict, message: str) -> dict:
    verdict = result.get("verdict") or {}
    return {"release": req["release"], "status": status,
            "baseline_release": result.get("baseline_release") or verdict.get("baseline_release"),
            "figures": result.get("figures"), "reason": verdict.get("reason") or (req.get("reason") or None),
            "message": message}


def perf_gate_outcome(requests: list, results: list) -> dict:
    """Each instance's gate answer from perf_probe's loop results (registered with ``failed_when:
    false``, loop_var ``_rollout_perf_req``).

    An instance is refused when perf_probe refused it (a figure past its limit) and also when the probe
    could not measure or record (an unreadable baseline, a server that stopped answering): a gate that
    cannot tell does not promote. ``promote``: the candidate records to rename, given only when no
    instance was refused (all or none, as readiness)."""
    by_name = {}
    for r in results or []:
        req = r.get("_rollout_perf_req") or {}
        if req.get("name") is not None and not r.get("skipped"):
            by_name[req["name"]] = r
    refused, reports, promote = {}, {}, []
    for req in requests or []:
        name = req["name"]
        if not req.get("measure"):
            status = OFF if "is off" in (req.get("reason") or "") else NOT_MEASURED
            reports[name] = _report(req, status, {}, req.get("reason") or "")
            continue
        result = by_name.get(name)
        msg = str((result or {}).get("msg") or "perf_probe gave no answer").strip().splitlines()[0]
        verdict = (result or {}).get("verdict")
        if result is None or not isinstance(verdict, dict):
            refused[name] = msg
            reports[name] = _report(req, ERROR, result or {}, msg)
        elif not verdict.get("passed", False):
            refused[name] = msg
            reports[name] = _report(req, verdict.get("status") or "refused", result, msg)
        elif not result.get("recorded"):
            refused[name] = msg if "record" in msg else f"the figures were not recorded: {msg}"
            reports[name] = _report(req, ERROR, result, refused[name])
        else:
            reports[name] = _report(req, verdict.get("status"), result, msg)
            promote.append({"name": name, "candidate": req["candidate"], "record": req["record"]})
    return {"refused": refused, "instances": reports, "promote": [] if refused else promote}


class FilterModule:
    def filters(self):
        return {"perf_gate_errors": perf_gate_errors, "perf_gate_requests": perf_gate_requests,
                "perf_gate_outcome": perf_gate_outcome}
