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
- ``readiness``: which instances a readiness wait (and the performance gate) found ready, and which not.
- ``rollback_order``: who goes back when one is not ready, in which order, and what each was (ready, untouched).
- ``rollback_target``: where each instance goes back to (the release it ran, its trusted ``previous``, nowhere).
- ``restore_files``: the configuration files it gets back from this run's backups.
- ``rollback_outcome``: the operator's line for each instance of a roll-back, and whether it serves now.
- ``surge_outcome``: whether a wave's surge workers serve, the operator's line for each, the failures' lines.
- ``rollback_refusal``: why an on-purpose rollback (rollback.yml) is refused before anything stops.
- ``previous_to_check``, ``keep_as_previous``: which ``current`` becomes ``previous`` at the switch, and why not.
"""

from __future__ import annotations

import posixpath


def _names(results, keep, key="item"):
    """The ``<key>.name`` (the loop variable's) of each loop result that ``keep`` accepts, in order, once each."""
    out = []
    for result in results or []:
        if not isinstance(result, dict):
            continue
        name = result[key].get("name") if isinstance(result.get(key), dict) else None
        if name is not None and keep(result) and name not in out:
            out.append(name)
    return out


_STAT_KEYS = ("exists", "islnk", "lnk_source")
_STATUS_KEYS = ("ActiveState", "UnitFileState")
_WRITE_KEYS = ("changed", "backup_file", "dest", "mode", "owner", "group")


def _named(result):
    """A loop result's ``item`` reduced to its name (the rollout reads no other key of it)."""
    item = result.get("item")
    return {"name": item.get("name")} if isinstance(item, dict) else {}


def _kept(result, keys):
    """The keys of ``result`` in ``keys``, with its item's name when it has an item."""
    out = {k: result[k] for k in keys if k in result}
    if "item" in result:
        out["item"] = _named(result)
    return out


def switched(restart, current=None, active=None, unit=None, launcher=None, env=None, dropin=None):
    """What the service's switch hands the rollout (``sglang_service_switched``): ``restart``, the instances to
    restart (restart_set); ``current``, each instance's ``current`` link before the switch (``stat``: exists,
    islnk, lnk_source); ``active``, each instance's unit state before it (``status``: ActiveState,
    UnitFileState); ``unit``, ``launcher``, ``env`` and ``dropin``, the configuration writes (changed,
    backup_file, dest, mode, owner, group). Of each read and write only the keys the rollout's decisions read: no
    file content and no diff (an env file holds the instance's API key) is carried into the fact."""
    def rows(results, part, keys):
        return [dict(_kept(r, ()), **{part: {k: (r.get(part) or {})[k] for k in keys if k in (r.get(part) or {})}})
                for r in results or [] if isinstance(r, dict)]
    return {
        "restart": [_text(n) for n in restart or []],
        "current": rows(current, "stat", _STAT_KEYS),
        "active": rows(active, "status", _STATUS_KEYS),
        "unit": _kept(unit, _WRITE_KEYS) if isinstance(unit, dict) else {},
        "launcher": _kept(launcher, _WRITE_KEYS) if isinstance(launcher, dict) else {},
        "env": [_kept(r, _WRITE_KEYS) for r in env or [] if isinstance(r, dict)],
        "dropin": [_kept(r, _WRITE_KEYS) for r in dropin or [] if isinstance(r, dict)],
    }


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


def _flag(value):
    """A yes/no as Ansible may hand it over: a bool, or the text of one."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _text(value):
    return "" if value is None else str(value)


def _by_name(results, name, key="item"):
    """The first loop result whose ``<key>.name`` is ``name`` ({} when none)."""
    for result in results or []:
        if isinstance(result, dict) and isinstance(result.get(key), dict) and result[key].get("name") == name:
            return result
    return {}


def readiness(results, refused=None):
    """The instances a readiness wait found ready and those it did not, each in the wait's order:
    ``{ready: [...], not_ready: [...]}``. ``results``: instance_ready's loop results (loop variable
    ``_rollout_instance``); ready is an answer ``ready: true``; one whose wait gave no answer at all is not
    ready. ``refused``: the performance gate's refusals ({name: line}): a refused instance counts as not ready."""
    waited = _names(results, lambda r: True, key="_rollout_instance")
    ready = _names(results, lambda r: r.get("ready") in (True,), key="_rollout_instance")  # equalto true
    ready = [n for n in ready if n not in (refused or {})]
    return {"ready": ready, "not_ready": [n for n in waited if n not in ready]}


def rollback_order(results, refused=None, present=None, earlier=None, later=None):
    """Who goes back when one instance of a restart is not ready, in the order they go back, each with what
    roll_back_one.yml needs to know of it: ``{instance, ready_result, was_ready, untouched, refusal}``.

    The instances that were not ready (or that the gate refused) come first, their diagnosis leading the message;
    then the others this restart waited for (ready: they go back with them), then the earlier waves' (ready,
    serving the new release), then the later waves' (``untouched``: never restarted, their configuration and
    ``current`` go back without a restart), in the order of ``present``."""
    state = readiness(results, refused)
    waited = {}
    for result in results or []:
        inst = result.get("_rollout_instance") if isinstance(result, dict) else None
        if isinstance(inst, dict) and inst.get("name") not in waited:
            waited[inst.get("name")] = inst
    earlier, later = list(earlier or []), list(later or [])
    names = state["not_ready"] + state["ready"]
    instances = [waited[n] for n in names]
    instances += [i for i in present or [] if isinstance(i, dict) and i.get("name") in earlier]
    instances += [i for i in present or [] if isinstance(i, dict) and i.get("name") in later]
    was_ready = set(state["ready"]) | set(earlier) | set(later)
    return [{"instance": inst, "ready_result": _by_name(results, inst.get("name"), "_rollout_instance"),
             "was_ready": inst.get("name") in was_ready, "untouched": inst.get("name") in later,
             "refusal": _text((refused or {}).get(inst.get("name"), ""))} for inst in instances]


def rollback_target(name, release_dir, current=None, active=None, previous=None, previous_exists=True):
    """Where instance ``name`` goes back to when a deploy rolls it back: ``{to, untrusted}``.

    What ran before this run: when ``current`` (the stat of each instance's ``current`` link before the switch)
    already named ``release_dir`` and the instance was running (``active``), the failure comes from this run's
    configuration: the same release goes back, on the restored configuration. Otherwise its ``previous``
    (trust.yml's answer, ``{target, errors}``), when it is trusted and is not ``release_dir``; else nowhere
    (``to`` ''): the instance is stopped. ``untrusted``: why ``previous`` is not used, when the link exists."""
    previous = previous or {}
    stat = _by_name(current, name).get("stat") or {}
    before = stat.get("lnk_source", "") if stat.get("islnk") else ""
    was_active = ((_by_name(active, name).get("status") or {}).get("ActiveState") == "active")
    errors = list(previous.get("errors") or [])
    target = _text(previous.get("target"))
    if before == release_dir and was_active:
        to = release_dir
    elif not errors and target != release_dir:
        to = target
    else:
        to = ""
    return {"to": _text(to), "untrusted": errors if _flag(previous_exists) else []}


def restore_files(name, unit=None, launcher=None, env=None, dropin=None):
    """The files this run changed that instance ``name`` goes back to, as they were before it: each write that
    left a backup (template ``backup: true``), of the shared unit template and launcher and of this instance's
    env file and drop-in; each ``{backup_file, dest, mode, owner, group}`` (the keys the write returned)."""
    results = [unit or {}, launcher or {}]
    results += [r for r in env or [] if isinstance(r, dict) and _by_name([r], name)]
    results += [r for r in dropin or [] if isinstance(r, dict) and _by_name([r], name)]
    keep = ("backup_file", "dest", "mode", "owner", "group")
    return [{k: r[k] for k in keep if k in r} for r in results if isinstance(r, dict) and "backup_file" in r]


def _basename(path):
    """As the ``basename`` filter says it (a path ending in ``/`` has none)."""
    return posixpath.basename(_text(path))


def rollback_outcome(unit, release_dir, rollback_to="", restore=None, untrusted=None, was_ready=False,
                     untouched=False, refusal="", ready_result=None, back=None, exception="", abi="n/a"):
    """The operator's line for one instance of a roll-back, and whether it serves now: ``{line, serving}``.

    ``unit``: its unit; ``release_dir``: the release that failed; ``rollback_to``: where it went back
    (rollback_target, '' for nowhere); ``restore``: the files put back (restore_files); ``untrusted``: why its
    ``previous`` was not used; ``was_ready``: it was ready (or never restarted); ``untouched``: a later wave's,
    never restarted; ``refusal``: the performance gate's line; ``ready_result``: its readiness answer;
    ``back``: the readiness answer of what it went back to; ``exception``: the journal's exception line;
    ``abi``: abi_check's verdict. Serving: brought back healthy, or ready with nothing before it (left serving);
    a later wave's instance was never drained, so it has no registration to take back."""
    unit, to, release = str(unit), _text(rollback_to), _basename(release_dir)
    was_ready, untouched = _flag(was_ready), _flag(untouched)
    back = back if isinstance(back, dict) else {}
    healthy = _flag(back.get("ready", False))
    restored = ("restored " + ", ".join(str(r.get("dest")) for r in restore) + " as before this run; "
                if restore else "")
    if to:
        rollback = ("rolled back to " + _basename(to) + ", which is "
                    + ("healthy" if healthy else "NOT healthy either: " + str(back.get("reason", "?"))))
    elif untrusted:
        rollback = "no previous release (" + "; ".join(str(e) for e in untrusted) + "): the instance was stopped"
    else:
        rollback = "no previous release: the instance was stopped"
    if untouched:
        line = (unit + " was not restarted by this run: " + restored
                + ("current back at " + _basename(to) + ", which it still runs" if to
                   else "no release to point current back at, so it runs this release at its next restart"))
    elif was_ready and not to:
        line = unit + " was ready on release " + release + ", and is left serving it: nothing ran before it"
    elif was_ready:
        line = unit + " was ready, and went back with the others: " + restored + rollback
    elif refusal:
        line = unit + " did not pass the performance gate: " + str(refusal) + "; " + restored + rollback
    else:
        why = str((ready_result or {}).get("reason", "readiness check did not run"))
        line = (unit + " did not become ready on release " + release + " (" + why + "): " + str(exception)
                + "; abi_check: " + str(abi) + "; " + restored + rollback)
    serving = (not untouched and was_ready and not to) or (bool(to) and healthy)
    return {"line": line, "serving": serving}


def surge_outcome(results, release_dir=""):
    """What the wait for a wave's surge workers means: ``{all_ready, report, failures}``. ``results``:
    instance_ready's loop results over the surge workers (``item``: each worker). ``all_ready``: every one
    answered ready (they are then registered with their routers, and the wave restarts); ``report``: one
    ``{name, line}`` per worker for the operator; ``failures``: the diagnosis' line of each one not ready
    (the run then goes back before the wave's instances are touched)."""
    report, failures, ready = [], [], 0
    for result in results or []:
        result = result if isinstance(result, dict) else {}
        worker = result.get("item") if isinstance(result.get("item"), dict) else {}
        name = worker.get("name")
        if result.get("ready"):
            ready += 1
            gpus = ", ".join(str(g) for g in worker.get("gpus") or [])
            said = ("ready on port " + str(worker.get("port")) + " (GPU " + gpus + ") after "
                    + str(result.get("seconds")) + "s, registered with its router")
        else:
            said = "NOT ready: " + str(result.get("reason", "no answer"))
        report.append({"name": name, "line": "surge: " + str(name) + " " + said})
        if result.get("ready") not in (True,):  # rejectattr('ready', 'equalto', true)
            failures.append("sglang-dflash@" + str(name) + ".service (a surge worker) did not become ready on release "
                            + _basename(release_dir) + ": " + str(result.get("reason", "no answer")))
    return {"all_ready": ready == len(results or []), "report": report, "failures": failures}


def rollback_refusal(name, previous=None, current_source="", previous_source=""):
    """Why an on-purpose rollback of instance ``name`` (rollback.yml) is refused before anything stops, or '':
    its ``previous`` (trust.yml's answer, ``{target, errors}``) is not a trusted release, or it is the release
    ``current`` runs (``current_source``, ``previous_source``: the links' targets)."""
    previous = previous or {}
    errors = list(previous.get("errors") or [])
    if errors:
        why = "; ".join(str(e) for e in errors)
    elif _text(previous_source) == _text(current_source):
        why = "previous is the release current runs (" + _text(previous.get("target")) + ")"
    else:
        return ""
    # The line break is the one the YAML's folded message had (a more-indented line kept it): byte for byte.
    return ("instance " + str(name) + ": no rollback, nothing was stopped: " + why
            + ";\ndeploy the release you want instead")


def _current_links(current):
    """Each ``current`` stat with its instance: (name, stat), in order."""
    return [(r["item"].get("name"), r.get("stat") or {}) for r in current or []
            if isinstance(r, dict) and isinstance(r.get("item"), dict)]


def previous_to_check(current, release_dir):
    """The ``current`` stats (switch.yml's, before the flip) whose link names a release other than
    ``release_dir``: each is checked (trust.yml) before it may become ``previous``."""
    return [r for r in current or [] if isinstance(r, dict) and isinstance(r.get("item"), dict)
            and (r.get("stat") or {}).get("islnk") and (r.get("stat") or {}).get("lnk_source") != release_dir]


def keep_as_previous(current, release_dir, trusted=None, base_dir=""):
    """What becomes each instance's ``previous`` when ``current`` flips to ``release_dir``: ``{keep: [{name,
    target}], not_kept: [{name, line}]}``. The release ``current`` named before is kept when it is another release
    and trust.yml found nothing wrong with it (``trusted``: its answers by link path,
    ``<base_dir>/instances/<name>/current``); one it has not read is not kept. A ``current`` the check refused is
    not kept, and the operator reads why: a later rollback would start it."""
    trusted = trusted or {}
    keep, not_kept = [], []
    for name, stat in _current_links(current):
        errors = (trusted.get(f"{base_dir}/instances/{name}/current") or {}).get("errors")
        if errors:
            not_kept.append({"name": name, "line": "not kept as previous: " + "; ".join(str(e) for e in errors)})
        elif stat.get("islnk") and stat.get("lnk_source") != release_dir and errors is not None:
            keep.append({"name": name, "target": stat.get("lnk_source")})
    return {"keep": keep, "not_kept": not_kept}
