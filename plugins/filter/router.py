# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang router's plan: one router per served model, its workers the instances serving it.

    {{ instances_present | dflash.deploy.router_errors(sglang_router_models, sglang_router_mode,
                                                              sglang_router_url) }}
      ->  []  or one line per problem (a model without a router entry, a port taken twice, ...)
    {{ instances_present | dflash.deploy.router_plan(sglang_router_models, sglang_router_mode,
                                                            sglang_router_url, sglang_router_worker_host) }}
      ->  [{model, unit, url, port, prometheus_port, policy, workers: [url, ...]}, ...]  (sorted by model)
    {{ plan | dflash.deploy.router_workers_by_url }}
      ->  {router_url: [worker url, ...]}
    {{ plan | dflash.deploy.router_host_ports }}
      ->  [{name, port, unit}, ...]  (a managed router's port and metrics port, for host_preflight)

Restart in waves, so that a model keeps a worker while its instances restart (the decision is
plugins/plugin_utils/rollout.py's restart_waves; dflash.deploy.rollout's main.yml calls rollout_wave_plan):

    {{ instances_present | dflash.deploy.router_restart_waves(names, sglang_router_enabled) }}
      ->  [[name, ...], ...]  (wave k: the k-th instance to restart of each served model)

Drain before a restart (roles/sglang_router/tasks/drain.yml, rejoin.yml):

    {{ plan | dflash.deploy.router_drain_targets(instances, names, worker_host) }}
      ->  [{name, model, router, worker}, ...]  (the instances named, in that order, that have a router)
    {{ worker_drain_results | dflash.deploy.router_drains }}
      ->  [{instance, model, router, worker, registered, removed, drained, timed_out, seconds, bound,
            in_flight, reason, error, router_answered}, ...]
    {{ drains | dflash.deploy.router_rejoin_targets(names) }}
      ->  {router_url: [worker url, ...]}  (the drained workers of the instances named)
    {{ router_workers_results | dflash.deploy.router_rejoins }}
      ->  [{router, workers, registered, error}, ...]
    {{ drains | dflash.deploy.router_drain_lines(rejoins) }}
      ->  one line per drain and per registration again, for the deploy summary

The role's own values in the router's unit, checked before any change (tasks/plan.yml), one line each naming
the variable, never its value:

    {{ settings | dflash.deploy.router_setting_errors }}
      ->  []  or one line per variable the unit cannot carry
    {{ plan | dflash.deploy.router_key_files(sglang_router_mode, sglang_router_config_dir) }}
      ->  {router_url: <config_dir>/router/<unit>.env}  (a managed router's control-plane key; external: {})

managed: the collection runs the router on the host, `http://127.0.0.1:<port>` of
sglang_router_models[model]; external: the operator's router, sglang_router_models[model].url or
else sglang_router_url. Workers: `http://<worker_host>:<instance port>`, sorted, once each.
"""
from __future__ import annotations

import re

from ansible_collections.dflash.deploy.plugins.filter.instances import SAFE_ACCOUNT, SAFE_PATH, as_int
from ansible_collections.dflash.deploy.plugins.plugin_utils.rollout import restart_waves as router_restart_waves

MODES = ("managed", "external")
POLICIES = ("cache_aware", "random", "round_robin", "power_of_two", "manual")
_UNIT_SAFE = re.compile(r"[A-Za-z0-9:_.-]")


# The router's unit (templates/sglang-router.service.j2) carries these role variables in ExecStart=,
# User=/Group=, EnvironmentFile=, RestartSec=, and its workers file (an EnvironmentFile=) the worker host.
# systemd starts a new setting at a newline, expands `%` specifiers in every setting and `$VAR` in ExecStart=.
ROUTER_HOSTS = ("sglang_router_host", "sglang_router_prometheus_host", "sglang_router_worker_host")
ROUTER_PATHS = ("sglang_router_base_dir", "sglang_router_config_dir", "sglang_router_venv")
ROUTER_ACCOUNTS = ("sglang_router_user", "sglang_router_group")
ROUTER_INTS = ("sglang_router_health_check_interval_secs", "sglang_router_health_failure_threshold",
               "sglang_router_health_success_threshold", "sglang_router_health_check_timeout_secs",
               "sglang_router_restart_sec")
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]+")
_ENDPOINT = re.compile(r"/[A-Za-z0-9._~/-]*")
# launch_router flags the role gives itself: the control-plane key (kept off the command line by the launcher)
# and the other authentication of the worker API. argparse takes an abbreviation too, hence the prefixes.
_ROLE_FLAGS = ("--control-plane", "--jwt")
# What systemd's ExecStart= reads otherwise than a shell would (the items are shell-quoted): quotes, backslash.
_EXTRA_REFUSED = {"'": "a single quote", '"': "a double quote", "\\": "a backslash", "`": "a backquote"}
KEY_VAR = "SGLANG_ROUTER_CONTROL_PLANE_API_KEY"


def _char_problem(text: str) -> str | None:
    """Why ``text`` cannot stand in a unit line as it is (said without the text), or None."""
    for char, what in (("\n", "a newline"), ("\r", "a carriage return")):
        if char in text:
            return f"holds {what}: a unit value must be one line (it would start a unit line of its own)"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "holds a control character: a unit value must be printable text"
    if "%" in text:
        return "holds '%', which systemd would expand as a specifier in the unit"
    if "$" in text:
        return "holds '$', which systemd would expand as a variable in ExecStart="
    return None


def _extra_arg_errors(args) -> list:
    if args in (None, ""):
        return []
    if not isinstance(args, (list, tuple)):
        return [f"sglang_router_extra_args is a {type(args).__name__}: give a list of words"]
    errors = []
    for i, arg in enumerate(args):
        where = f"sglang_router_extra_args item {i + 1}"
        if isinstance(arg, (dict, list, tuple, set)) or arg is None:
            errors.append(f"{where} is not a string: give each argument as one string")
            continue
        text = str(arg)
        problem = _char_problem(text) or next(
            (f"holds {what}, which systemd's ExecStart= reads otherwise than the shell quoting the role writes"
             for char, what in _EXTRA_REFUSED.items() if char in text), None)
        if problem:
            errors.append(f"{where} {problem}")
        elif not text:
            errors.append(f"{where} is empty")
        elif text.startswith(_ROLE_FLAGS):
            errors.append(f"{where} is a control-plane authentication flag, which the role sets itself (the router's "
                          f"key, {KEY_VAR} in its env file, off the command line): remove it")
    return errors


def router_setting_errors(settings) -> list:
    """One line per role variable (name: value) that the router's unit cannot carry: a newline, CR or other
    control character, a `%` or `$` (systemd would expand them) in any of them; a host that is not an address or
    host name, a path that is not absolute plain characters, an account that is not a name, a count that is not a
    whole number, a health-check endpoint that is not a plain path; an extra argument holding a quote or a
    backslash, or one of the control-plane authentication flags the role sets. No value is repeated."""
    errors = []
    for name, value in (settings or {}).items():
        if name == "sglang_router_extra_args":
            errors += _extra_arg_errors(value)
            continue
        if isinstance(value, (dict, list, tuple, set)):
            errors.append(f"{name} is a {type(value).__name__}: give one value")
            continue
        text = "" if value is None else str(value)
        problem = _char_problem(text)
        if problem:
            errors.append(f"{name} {problem}")
        elif name in ROUTER_HOSTS and not _HOST.fullmatch(text):
            errors.append(f"{name}: give an IP address or a host name (letters, digits, '.', ':', '-', '_')")
        elif name in ROUTER_PATHS and (not SAFE_PATH.fullmatch(text) or "/../" in text + "/"):
            errors.append(f"{name}: give an absolute path of letters, digits and . _ + - / only (the unit names it)")
        elif name in ROUTER_ACCOUNTS and not SAFE_ACCOUNT.fullmatch(text):
            errors.append(f"{name}: give a user or group name of letters, digits, '_', '.' and '-'")
        elif name in ROUTER_INTS and (as_int(value) is None or as_int(value) < 0):
            errors.append(f"{name}: give a whole number of 0 or more")
        elif name == "sglang_router_health_check_endpoint" and not _ENDPOINT.fullmatch(text):
            errors.append(f"{name}: give a path such as /health (letters, digits and . _ ~ - /)")
    return errors


def router_key_files(plan: list, mode: str = "managed", config_dir: str = "/etc/dflash") -> dict:
    """{router url: its control-plane key's env file on the host}: a managed router's
    ``<config_dir>/router/<unit>.env`` (``SGLANG_ROUTER_CONTROL_PLANE_API_KEY``); an external router's key is not
    the role's (none)."""
    if mode != "managed":
        return {}
    return {item["url"]: f"{config_dir}/router/{item['unit']}.env" for item in plan or []}


def unit_instance(name: str) -> str:
    """The systemd instance name of a served model: the characters a unit name allows kept
    (``qwen3-8b-dflash`` stays itself), every other byte, a leading dot and ``/`` included,
    ``\\xNN`` as systemd writes them; two names never give one unit."""
    out = []
    for i, ch in enumerate(str(name)):
        if _UNIT_SAFE.match(ch) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend("\\x%02x" % b for b in ch.encode("utf-8"))
    return "".join(out)


def _models(instances: list) -> dict:
    """{served_model_name: [instance, ...]} of the present instances."""
    grouped: dict = {}
    for inst in instances or []:
        grouped.setdefault(str(inst.get("served_model_name") or ""), []).append(inst)
    return grouped


def _port(value):
    if isinstance(value, bool):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        return None
    return port if 1 <= port <= 65535 else None


def router_errors(instances: list, models: dict, mode: str = "managed", url: str = "") -> list:
    """Why the router cannot be planned, one line each; [] when it can."""
    errors = []
    if mode not in MODES:
        return [f"sglang_router_mode {mode!r} is not one of {', '.join(MODES)}"]
    models = models or {}
    if not isinstance(models, dict):
        return ["sglang_router_models must be a mapping {served_model_name: {port, prometheus_port, policy}}"]
    grouped = _models(instances)
    if "" in grouped:
        names = ", ".join(str(i.get("name")) for i in grouped[""])
        errors.append(f"instance(s) {names} have no served_model_name: the router groups its workers by it")
    used: dict = {}
    for inst in instances or []:
        port = _port(inst.get("port"))
        if port:
            used[port] = f"instance {inst.get('name')}"
    for model in sorted(m for m in grouped if m):
        entry = models.get(model)
        if entry is not None and not isinstance(entry, dict):
            errors.append(f"sglang_router_models[{model!r}] must be a mapping")
            continue
        entry = entry or {}
        policy = entry.get("policy", "round_robin")
        if policy not in POLICIES:
            errors.append(f"sglang_router_models[{model!r}].policy {policy!r} is not one of {', '.join(POLICIES)}")
        if mode == "external":
            if not (entry.get("url") or url):
                errors.append(f"served model {model!r} has no router: set sglang_router_url or "
                              f"sglang_router_models[{model!r}].url")
            continue
        if model not in models:
            errors.append(f"served model {model!r} has no entry in sglang_router_models (its port and prometheus_port)")
            continue
        for key in ("port", "prometheus_port"):
            port = _port(entry.get(key))
            if port is None:
                errors.append(f"sglang_router_models[{model!r}].{key} {entry.get(key)!r} is not a port (1-65535)")
            elif port in used:
                errors.append(f"sglang_router_models[{model!r}].{key} {port} is also the port of {used[port]}")
            else:
                used[port] = f"the router of {model!r} ({key})"
    return errors


def router_plan(instances: list, models: dict, mode: str = "managed", url: str = "",
                worker_host: str = "127.0.0.1") -> list:
    """One entry per served model of the present instances (call router_errors first)."""
    errors = router_errors(instances, models, mode, url)
    if errors:
        raise ValueError("; ".join(errors))
    models = models or {}
    plan = []
    for model, members in sorted(_models(instances).items()):
        entry = models.get(model) or {}
        workers = sorted({f"http://{worker_host}:{int(i['port'])}" for i in members})
        item = {"model": model, "unit": unit_instance(model), "policy": entry.get("policy", "round_robin"),
                "workers": workers}
        if mode == "managed":
            item.update(port=int(entry["port"]), prometheus_port=int(entry["prometheus_port"]),
                        url=f"http://127.0.0.1:{int(entry['port'])}")
        else:
            item.update(url=str(entry.get("url") or url).rstrip("/"))
        plan.append(item)
    return plan


def router_workers_by_url(plan: list) -> dict:
    """{router url: [worker url, ...]}: the routers' workers, routers sharing a URL merged."""
    out: dict = {}
    for item in plan or []:
        out.setdefault(item["url"], set()).update(item["workers"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def router_host_ports(plan: list) -> list:
    """The ports a managed router listens on, as host_preflight_other_ports takes them: its port and its
    prometheus port, each named for what listens there and owned by the router's own unit
    (sglang-router@<unit>.service), so that a re-run finds them held by their own unit, not by another
    process. An external router listens elsewhere: none."""
    out = []
    for item in plan or []:
        unit = "sglang-router@%s.service" % item["unit"]
        for key, what in (("port", "port"), ("prometheus_port", "metrics port")):
            if item.get(key) is not None:
                out.append({"name": f"the router of {item['model']!r} ({what})", "port": int(item[key]), "unit": unit})
    return out


def router_drain_targets(plan: list, instances: list, names: list, worker_host: str = "127.0.0.1") -> list:
    """The instances ``names`` (in that order) that serve a model of ``plan``: each with its model, its
    router's URL and its worker URL as the plan registers it (``http://<worker_host>:<port>``)."""
    routers = {item["model"]: item["url"] for item in plan or []}
    by_name = {str(i.get("name")): i for i in instances or []}
    out = []
    for name in names or []:
        inst = by_name.get(str(name))
        model = str((inst or {}).get("served_model_name") or "")
        port = _port((inst or {}).get("port"))
        if inst is None or model not in routers or port is None:
            continue
        out.append({"name": str(name), "model": model, "router": routers[model],
                    "worker": f"http://{worker_host}:{port}"})
    return out


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def router_drains(results: list) -> list:
    """One record per ``worker_drain`` result of drain.yml's loop (its loop variable
    ``_sglang_router_drain_target``): what the drain did, ``error`` the module's message when it failed
    (``failed``, or, under ``failed_when: false``, a result without ``registered``; the restart then went on
    without a drain), ``bound`` the timeout it was given (its result's ``timeout``)."""
    out = []
    for res in results or []:
        res = res if isinstance(res, dict) else {}
        target = res.get("_sglang_router_drain_target") or {}
        bound = res.get("timeout", ((res.get("invocation") or {}).get("module_args") or {}).get("timeout"))
        # failed_when: false turns `failed` off; a module that failed still has no `registered`
        failed = bool(res.get("failed")) or "registered" not in res
        out.append({
            "instance": target.get("name"), "model": target.get("model"),
            "router": res.get("router") or target.get("router"), "worker": res.get("worker") or target.get("worker"),
            "registered": bool(res.get("registered")), "removed": bool(res.get("removed")),
            "drained": bool(res.get("drained")), "timed_out": bool(res.get("timed_out")),
            "seconds": _number(res.get("seconds")) or 0.0, "bound": _number(bound),
            "in_flight": _number(res.get("in_flight")), "reason": res.get("reason"),
            "error": (str(res.get("msg") or "failed") if failed else None),
            "router_answered": bool(res.get("router_answered", not failed)),
        })
    return out


def router_rejoin_targets(drains: list, names: list) -> dict:
    """{router url: [worker url, ...]}: the workers drained out of their router (``removed``) whose instance is
    one of ``names``."""
    wanted = {str(n) for n in names or []}
    out: dict = {}
    for d in drains or []:
        if d.get("removed") and str(d.get("instance")) in wanted:
            out.setdefault(d["router"], set()).add(d["worker"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def router_rejoins(results: list) -> list:
    """One record per ``router_workers`` result of rejoin.yml's loop (its loop item ``{key: router, value:
    workers}``): ``registered`` whether the workers are registered again, ``error`` why not."""
    out = []
    for res in results or []:
        res = res if isinstance(res, dict) else {}
        item = res.get("item") or {}
        failed = bool(res.get("failed")) or "after" not in res  # as in router_drains: `after` is always returned
        out.append({"router": item.get("key"), "workers": list(item.get("value") or []), "registered": not failed,
                    "error": str(res.get("msg") or "failed") if failed else None})
    return out


def _seconds(value) -> str:
    value = _number(value) or 0.0
    return ("%.1f" % value).rstrip("0").rstrip(".") + "s"


def _requests(count) -> str:
    return "1 request" if count == 1 else f"{count} requests"


def router_surge_record(result: dict, state: str) -> dict:
    """One record of the surge entry point's loop (its item: {name, model, router, worker}): ``ok`` whether the
    worker was registered (present) or taken out (absent), ``seconds`` the drain's, ``error`` why not."""
    result = result if isinstance(result, dict) else {}
    item = result.get("item") or {}
    failed = bool(result.get("failed")) or ("after" not in result if state == "present" else "registered" not in result)
    return {"instance": item.get("name"), "router": item.get("router"), "worker": item.get("worker"), "state": state,
            "ok": not failed, "seconds": _number(result.get("seconds")) or 0.0,
            "error": str(result.get("msg") or "failed") if failed else None}


def router_surge_line(record: dict) -> str:
    """A surge worker's drain out of its router (the surge entry point's ``absent`` record) in words."""
    record = record if isinstance(record, dict) else {}
    name, router = record.get("instance"), record.get("router")
    if not record.get("ok"):
        return f"router: surge worker {name} was not taken out of {router} ({record.get('error')}); it was stopped"
    return (f"router: surge worker {name} served while its instance restarted; taken out of {router}, drained in "
            f"{_seconds(record.get('seconds'))}, stopped")


def router_drain_lines(drains: list, rejoins: list | None = None) -> list:
    """The drains and the registrations again in words, one line each (``router: ...``), for the deploy summary
    and a roll-back's diagnosis. A worker the router did not have says nothing."""
    lines = []
    for d in drains or []:
        name, router = d.get("instance"), d.get("router")
        bound = _seconds(d.get("bound")) if d.get("bound") is not None else "its"
        if d.get("error"):
            lines.append(f"router: {name} was not taken out of {router} ({d['error']}); it restarted without a drain")
        elif not d.get("router_answered"):
            lines.append(f"router: {router} does not answer: {name} not drained")
        elif not d.get("registered"):
            continue
        elif not d.get("removed"):
            lines.append(f"router: {name} would be taken out of {router} and drained (at most {bound}) before its "
                         "restart")
        elif d.get("drained"):
            lines.append(f"router: {name} taken out of {router}, drained in {_seconds(d.get('seconds'))}")
        elif d.get("in_flight") is not None:
            lines.append(f"router: {name} taken out of {router}, NOT drained: {_requests(d['in_flight'])} still in "
                         f"flight at the {bound} bound, restarted with them")
        else:
            lines.append(f"router: {name} taken out of {router}, NOT drained: its load unknown "
                         f"({d.get('reason') or 'no answer'}) until the {bound} bound, then restarted")
    named = {(d.get("router"), d.get("worker")): d.get("instance") for d in drains or []}
    for r in rejoins or []:
        workers = ", ".join(str(named.get((r.get("router"), w)) or w) for w in r.get("workers") or [])
        if r.get("registered"):
            lines.append(f"router: {workers} registered again with {r.get('router')}")
        else:
            lines.append(f"router: {workers} NOT registered again with {r.get('router')}: {r.get('error')}")
    return lines


class FilterModule:
    def filters(self):
        return {
            "router_errors": router_errors,
            "router_setting_errors": router_setting_errors,
            "router_key_files": router_key_files,
            "router_plan": router_plan,
            "router_host_ports": router_host_ports,
            "router_workers_by_url": router_workers_by_url,
            "router_unit_instance": unit_instance,
            "router_restart_waves": router_restart_waves,
            "router_drain_targets": router_drain_targets,
            "router_drains": router_drains,
            "router_rejoin_targets": router_rejoin_targets,
            "router_rejoins": router_rejoins,
            "router_drain_lines": router_drain_lines,
            "router_surge_record": router_surge_record,
            "router_surge_line": router_surge_line,
        }
