# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's decisions, one pure function each, on the controller (issue 43: the rollout's decisions in one
Python home, behind thin filters in plugins/filter/rollout.py). They read the results the role's tasks
registered, as Ansible hands them over, and decide; they run nothing and change nothing.

- ``restart_set``: which instances restart in this run, in the order the instance list names them.
- ``restart_waves``: those instances split into waves, one instance of each served model at a time (router on).
- ``wave_plan``: each wave's plan: what restarts, what is waited for, which instances get a surge worker, what is
  drained, what ran before and what comes after it.
- ``waves_line``: the operator's line for a restart in several waves.
"""

from __future__ import annotations


def _names(results, keep):
    """The ``item.name`` of each loop result that ``keep`` accepts, in order, once each."""
    out = []
    for result in results or []:
        if not isinstance(result, dict):
            continue
        name = (result.get("item") or {}).get("name") if isinstance(result.get("item"), dict) else None
        if name is not None and keep(result) and name not in out:
            out.append(name)
    return out


def restart_set(present, changed=None, current=None, active=None, release_dir="", reverified=False,
                whole_unit=False, started_before=None):
    """The names of the instances this run restarts, in the order of ``present``.

    ``present``: the present instances (dicts with ``name``) or their names. ``changed``: the loop results of the
    writes that concern one instance (its env file, its drop-in, its ``current`` flip): each that changed restarts
    its instance. ``current``: the stat of each instance's ``current`` link before the flip; with ``reverified``
    (the release was verified again in this run, on files that changed), each instance whose link already named
    ``release_dir`` restarts onto the re-verified files. ``active``: each instance's unit state (``status``); one
    that is not active starts. ``whole_unit``: the unit template or the launcher changed: every instance restarts.
    ``started_before``: config_files.started_before_config's entries, instances that run a configuration older
    than their files (an interrupted run's writes, a unit systemd has not read again)."""
    names = [p.get("name") if isinstance(p, dict) else p for p in present or []]
    if whole_unit:
        wanted = set(names)
    else:
        wanted = set(_names(changed, lambda r: bool(r.get("changed"))))
        if reverified:
            wanted |= set(_names(current, lambda r: (r.get("stat") or {}).get("islnk")
                                 and (r.get("stat") or {}).get("lnk_source") == release_dir))
        wanted |= set(_names(active, lambda r: (r.get("status") or {}).get("ActiveState") != "active"))
        wanted |= {e.get("name") for e in started_before or [] if isinstance(e, dict)}
    return [n for n in names if n in wanted]


def restart_waves(present, names, enabled=True):
    """The instances ``names`` (in that order) split into restart waves: wave k holds the k-th of them of each
    served model, so two instances of one model never restart together and the model's router keeps a worker
    while each restarts (the other is registered again before the next wave drains). With the router off
    (``enabled`` false) there is nothing to keep serving: one wave of all. A name that is not a present
    instance, or one without a served model, goes in the first wave. No names: no wave."""
    names = list(dict.fromkeys(str(n) for n in names or []))
    if not names:
        return []
    if not enabled:
        return [names]
    model_of = {str(i.get("name")): str(i.get("served_model_name") or "") for i in present or []
                if isinstance(i, dict)}
    waves = []
    seen = {}
    for name in names:
        model = model_of.get(name, "")
        k = seen.get(model, 0) if model else 0
        if model:
            seen[model] = k + 1
        while len(waves) <= k:
            waves.append([])
        waves[k].append(name)
    return waves


def waves_line(waves):
    """The operator's line for a restart in more than one wave ('' for one wave or none)."""
    waves = [list(w) for w in waves or []]
    if len(waves) < 2:
        return ""
    return ("restart in %d waves, one instance of each served model at a time: %s"
            % (len(waves), " | ".join(", ".join(str(n) for n in w) for w in waves)))


def _running(active):
    """The names whose unit state (``status.ActiveState``) is ``active``, in the results' order."""
    return _names(active, lambda r: (r.get("status") or {}).get("ActiveState") == "active")


def wave_plan(present, names, enabled=False, active=None):
    """The restart, wave by wave: one dict per wave of ``restart_waves`` (``enabled``: the router runs).

    - ``restart``: the wave's instance names; ``waited``: their instance dicts, in the order of ``present``
      (readiness and the performance gate wait for these);
    - ``earlier``: the names of the waves before it (serving the new release when this wave starts);
      ``later``: those of the waves after it (not restarted yet: a roll-back restores them without a restart);
    - ``serving``: the wave's instances whose unit was ``active`` before the run (``active``: each instance's
      unit state), in that order;
    - ``surge``: those of ``serving`` that declare ``surge``, in the order of ``present``: each gets a surge
      worker before the wave restarts. Only with the router on (a surge worker serves through it); an instance
      that does not run yet has nothing to keep serving;
    - ``drain``: the instances taken out of their routers before the restart and registered again after it (the
      wave, with the router on; none with it off)."""
    by_name = {str(i.get("name")): i for i in present or [] if isinstance(i, dict)}
    order = list(by_name)
    running = _running(active)
    waves = restart_waves(present, names, enabled)
    plan = []
    for k, wave in enumerate(waves):
        serving = [n for n in running if n in wave]
        plan.append({
            "restart": wave,
            "waited": [by_name[n] for n in order if n in wave],
            "earlier": [n for w in waves[:k] for n in w],
            "later": [n for w in waves[k + 1:] for n in w],
            "serving": serving,
            "surge": [n for n in order if enabled and n in serving and by_name[n].get("surge")],
            "drain": list(wave) if enabled else [],
        })
    return plan
