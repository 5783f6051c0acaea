# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU identity: an instance's `gpus` are nvidia-smi indexes; the card behind an index can change.

    {{ instances | dflash.deploy.gpu_identities(probe.gpus) }}
      ->  {instance: [{index, uuid, pci_bus_id, minor}, ...]}
    {{ instances | dflash.deploy.gpu_identity_errors(probe.gpus, recorded, accept_moved) }}
      ->  []  or one line per GPU whose index now names another card

Three numberings meet here. nvidia-smi's index counts the GPUs the driver knows, in PCI bus
order; CUDA, with CUDA_DEVICE_ORDER=PCI_BUS_ID (the env file sets it), counts the same way; the
/dev/nvidia<minor> node that DeviceAllow= must name is fixed for the card. When a GPU drops off
the bus, as in the incident, every index after it shifts and the minors do not: `gpus: [2]` then
names the next card. So preflight resolves each index once to the card's UUID, bus id and minor;
the drop-in allows the minor; the instance records index -> UUID
(/opt/dflash/instances/<name>/gpus.json), and a later deploy whose index names another card stops
before any change, naming both cards and where the recorded one is now.
"""
from __future__ import annotations


def _by_index(probe_gpus: list) -> dict:
    return {g.get("index"): g for g in probe_gpus or [] if isinstance(g, dict)}


def gpu_identities(instances: list, probe_gpus: list) -> dict:
    """{instance name: [{index, uuid, pci_bus_id, minor}]} for the GPUs nvidia-smi lists
    (an index it does not list is left out: preflight refuses it on its own)."""
    listed = _by_index(probe_gpus)
    out = {}
    for inst in instances or []:
        out[inst["name"]] = [{"index": i, "uuid": listed[i].get("uuid"), "pci_bus_id": listed[i].get("pci_bus_id"),
                              "minor": listed[i].get("minor")}
                             for i in inst.get("gpus") or [] if i in listed]
    return out


def _card(gpu: dict) -> str:
    return f"{gpu.get('uuid')} ({gpu.get('pci_bus_id')})"


def gpu_identity_errors(instances: list, probe_gpus: list, recorded: dict, accept_moved=False) -> list:
    """One line per assigned GPU whose identity cannot be trusted:
    - its minor number is unknown (DeviceAllow= could name another card's node);
    - the instance recorded another card at that index (unless accept_moved)."""
    listed = _by_index(probe_gpus)
    by_uuid = {g.get("uuid"): g for g in listed.values()}
    errors = []
    for inst in instances or []:
        name = inst["name"]
        before = (recorded or {}).get(name) or {}
        for index in inst.get("gpus") or []:
            gpu = listed.get(index)
            if gpu is None:
                continue  # not listed at all: preflight's own refusal names it
            if not isinstance(gpu.get("minor"), int):
                errors.append(f"instance {name}: GPU {index} ({gpu.get('pci_bus_id')}) has no minor number in "
                              "`nvidia-smi -q`: its /dev/nvidia node cannot be named for DeviceAllow=")
                continue
            was = before.get(str(index))
            if accept_moved or not was or was.get("uuid") == gpu.get("uuid"):
                continue
            now = by_uuid.get(was.get("uuid"))
            where = (f"that card is now GPU {now.get('index')}: set gpus to the index of the card you mean"
                     if now is not None else "that card is not listed any more (dead or gone from the bus)")
            errors.append(f"instance {name}: GPU {index} is now {_card(gpu)}, not {_card(was)} it was deployed on; "
                          f"{where}, or set sglang_service_gpus_moved=true to move the instance to {gpu.get('uuid')}")
    return errors


def gpu_record(identities: list) -> dict:
    """The instance's record: {"<index>": {uuid, pci_bus_id, minor}} (JSON keys are strings)."""
    return {str(g["index"]): {"uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"], "minor": g["minor"]}
            for g in identities or []}


class FilterModule:
    def filters(self):
        return {"gpu_identities": gpu_identities, "gpu_identity_errors": gpu_identity_errors, "gpu_record": gpu_record}
