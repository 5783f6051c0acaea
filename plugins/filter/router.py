# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang router's plan: one router per served model, its workers the instances serving it.

    {{ _sglang_service_present | dflash.deploy.router_errors(sglang_router_models, sglang_router_mode,
                                                              sglang_router_url) }}
      ->  []  or one line per problem (a model without a router entry, a port taken twice, ...)
    {{ _sglang_service_present | dflash.deploy.router_plan(sglang_router_models, sglang_router_mode,
                                                            sglang_router_url, sglang_router_worker_host) }}
      ->  [{model, unit, url, port, prometheus_port, policy, workers: [url, ...]}, ...]  (sorted by model)
    {{ plan | dflash.deploy.router_workers_by_url }}
      ->  {router_url: [worker url, ...]}

managed: the collection runs the router on the host, `http://127.0.0.1:<port>` of
sglang_router_models[model]; external: the operator's router, sglang_router_models[model].url or
else sglang_router_url. Workers: `http://<worker_host>:<instance port>`, sorted, once each.
"""
from __future__ import annotations

import re

MODES = ("managed", "external")
POLICIES = ("cache_aware", "random", "round_robin", "power_of_two", "manual")
_UNIT_SAFE = re.compile(r"[A-Za-z0-9:_.-]")


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


class FilterModule:
    def filters(self):
        return {
            "router_errors": router_errors,
            "router_plan": router_plan,
            "router_workers_by_url": router_workers_by_url,
            "router_unit_instance": unit_instance,
        }
