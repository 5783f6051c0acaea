# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""instance_errors: what is wrong with an instance list, one actionable phrase per problem.

    {{ instances | dflash.deploy.instance_errors }}  ->  [] when the list is sound

Types and unknown keys are the argument spec's job; this checks what a spec cannot: unique
names, ports in range and not shared, GPUs not shared, the keys a present instance needs.
"""
from __future__ import annotations

import re

NAME = re.compile(r"^[A-Za-z0-9_-]+$")
NEEDED = ("model_path", "served_model_name", "gpus", "port")


def _shared(present: list, key: str) -> dict:
    seen: dict = {}
    for inst in present:
        values = inst.get(key)
        for value in values if isinstance(values, list) else [values]:
            seen.setdefault(value, []).append(str(inst.get("name")))
    return {value: names for value, names in seen.items() if len(names) > 1}


def instance_errors(instances: list) -> list:
    errors = []
    names = [str(i.get("name")) for i in instances]
    for name in sorted({n for n in names if names.count(n) > 1}):
        errors.append(f"instance name {name} is used twice: names must be unique")
    for name in names:
        if not NAME.match(name):
            errors.append(f"instance name {name!r}: use letters, digits, '-' and '_' only")
    for inst in instances:
        state = inst.get("state", "present")
        if state not in ("present", "absent"):
            errors.append(f"instance {inst.get('name')}: state {state!r} is not present or absent")
    present = [i for i in instances if i.get("state", "present") == "present"]
    for inst in present:
        missing = [k for k in NEEDED if inst.get(k) in (None, "", [])]
        if missing:
            errors.append(f"instance {inst.get('name')}: set {', '.join(missing)}")
        port = inst.get("port")
        if isinstance(port, int) and not 1 <= port <= 65535:
            errors.append(f"instance {inst.get('name')}: port {port} is out of range (1-65535)")
    for port, owners in sorted(_shared(present, "port").items(), key=lambda kv: str(kv[0])):
        if port is not None:
            errors.append(f"port {port} is assigned to {' and '.join(owners)}: give each instance its own port")
    for gpu, owners in sorted(_shared(present, "gpus").items(), key=lambda kv: str(kv[0])):
        errors.append(f"GPU {gpu} is assigned to {' and '.join(owners)}: give each instance its own GPUs")
    return errors


class FilterModule:
    def filters(self):
        return {"instance_errors": instance_errors}
