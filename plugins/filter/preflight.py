# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What preflight asks the host about each instance, and whose processes it then refuses.

    {{ present | dflash.deploy.preflight_request(gpus, base_dir, service_user, others) }}  preflight_info's options
    {{ holders | dflash.deploy.foreign_holders(name) }}   the port or GPU holders that are not the instance's unit
    {{ holders | dflash.deploy.foreign_holders(name, unit) }}  ... that are not that unit (another service's port)
    {{ holders | dflash.deploy.holder_lines }}            "python3 (pid 4242, ddtree-stopgap.service)" each

The request is the options of the ``dflash.deploy.preflight_info`` module: per present
instance its unit, its port, the processes nvidia-smi lists on its GPUs (``gpus`` is pkg_probe's
list; an instance's ``gpus`` are nvidia-smi indexes) and the model directories that must already
be on the host. A directory the role stages from the controller (``model_controller_dir``,
``draft_model_controller_dir``) is not asked about: it is put there after preflight. ``others`` are
the ports of other services the deploy runs on the host ({name, port, unit}: a managed router's),
asked about under their name, beside the instances'.
"""
from __future__ import annotations


def unit_name(name) -> str:
    """The systemd unit of an instance: the template sglang-dflash@.service with the name as instance."""
    return "sglang-dflash@%s.service" % name


def _pid(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def gpu_pids(instance, gpus) -> list:
    """The pids nvidia-smi lists on the instance's GPUs (by index), in the order it lists them."""
    wanted = instance.get("gpus") or []
    out = []
    for gpu in gpus or []:
        if not isinstance(gpu, dict) or gpu.get("index") not in wanted:
            continue
        for proc in gpu.get("processes") or []:
            pid = _pid(proc.get("pid")) if isinstance(proc, dict) else None
            if pid is not None:
                out.append(pid)
    return out


def model_dirs(instance) -> list:
    """The model directories that must be on the host before anything changes."""
    out = []
    for key in ("model_path", "draft_model_path"):
        path = instance.get(key) or ""
        if path and not instance.get(key.replace("_path", "_controller_dir")):
            out.append(path)
    return out


def preflight_request(present, gpus, base_dir, service_user, others=None) -> dict:
    """The options preflight_info answers (base_dir, service_user, units, ports, pids, models), for the
    present instances and the other services' ports (no GPU pids, no model directories)."""
    request = {"base_dir": base_dir, "service_user": service_user, "units": {}, "ports": {}, "pids": {},
               "models": {}}
    for inst in present or []:
        name = inst["name"]
        request["units"][name] = unit_name(name)
        request["ports"][name] = inst.get("port")
        request["pids"][name] = gpu_pids(inst, gpus)
        request["models"][name] = model_dirs(inst)
    for other in others or []:
        name = other["name"]
        request["units"][name] = other["unit"]
        request["ports"][name] = other["port"]
        request["pids"][name] = []
        request["models"][name] = []
    return request


def foreign_holders(holders, name, unit=None) -> list:
    """The holders (preflight_info's entries: pid, comm, unit) that are not the instance's own unit, or
    not ``unit`` when it is given (another service's port: a managed router's)."""
    own = unit or unit_name(name)
    return [h for h in holders or [] if not (isinstance(h, dict) and h.get("unit") == own)]


def holder_lines(holders) -> list:
    """One "comm (pid N, unit)" per holder; a process outside any unit says so."""
    return ["%s (pid %s, %s)" % (h.get("comm"), h.get("pid"), h.get("unit") or "no unit") for h in holders or []]


class FilterModule:
    def filters(self):
        return {
            "preflight_request": preflight_request,
            "foreign_holders": foreign_holders,
            "holder_lines": holder_lines,
        }
