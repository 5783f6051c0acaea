# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller gives a deploy: a command to push, and the artifact store.

    {{ dflash_uv_path | default('uv') | dflash.deploy.controller_command('dflash_uv_path') }}
      ->  the absolute path of that command on the controller
    {{ dflash_controller_dir | default('') | dflash.deploy.artifact_store('stage_artifacts_dir') }}
      ->  <dflash_controller_dir>/artifacts
    {{ 'dflash_overlay' | dflash.deploy.run_scratch }}
      ->  <Ansible's own temporary directory of this run>/dflash-dflash_overlay

Filters run on the controller, which is where these live. Nothing here derives a path from the
playbook's directory: from an installed collection, an AWX job or a wrapper playbook that
directory is the collection's install directory or a throwaway one. Each failure is one line
naming the variable to set.
"""
from __future__ import annotations

import os
import re
import shutil

from ansible import constants as C
from ansible.errors import AnsibleFilterError


def controller_command(value, variable: str = "dflash_uv_path", required: bool = True) -> str:
    """The absolute path of a command on the controller.

    A value holding a ``/`` is a path (``~`` expanded, relative paths taken from the
    controller's working directory) and must be an executable file. A bare name is looked
    up on the controller's PATH, as a shell would (``shutil.which``). With ``required``
    false, a command the controller does not have is ``""`` instead of an error."""
    name = str(value or "").strip()
    if not name:
        if not required:
            return ""
        raise AnsibleFilterError(f"{variable} is empty: set it to a binary on the controller")
    if "/" in name:
        path = os.path.abspath(os.path.expanduser(name))
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            if not required:
                return ""
            raise AnsibleFilterError(f"{variable}: {path} is not an executable file on the controller: "
                                     f"set {variable} to the binary's path")
        return path
    found = shutil.which(name)
    if not found:
        if not required:
            return ""
        raise AnsibleFilterError(f"no {name!r} on the controller's PATH ({os.environ.get('PATH', '')}): "
                                 f"install it there, or set {variable} to its path")
    return os.path.abspath(found)


CONTROLLER_DIR_UNSET = (
    "dflash_controller_dir is not set: set it in the inventory to a controller directory that keeps the staged "
    "artifacts and survives the run, or set dflash_artifact_store_host to an inventory host that keeps them "
    "(a controller that keeps nothing, as an AWX job's)")


def controller_dir_refusal(controller_dir, store_host="") -> str:
    """Why a run has nowhere to keep the staged artifacts, in one line naming both places a
    inventory can declare; ``""`` when it has one (dflash_controller_dir, or an artifact store
    host). A play fails with it in its first task, before the filters below raise."""
    if str(controller_dir or "").strip() or str(store_host or "").strip():
        return ""
    return CONTROLLER_DIR_UNSET


def artifact_store(controller_dir, override: str = "stage_artifacts_dir") -> str:
    """``<controller_dir>/artifacts``, the controller directory that keeps staged artifacts
    (the CUDA bundle, the DFlash sources). ``controller_dir`` is ``dflash_controller_dir``:
    it has no default, because a default would have to guess where the controller keeps
    things (an AWX job's directory is gone when the job ends)."""
    base = str(controller_dir or "").strip()
    if not base:
        raise AnsibleFilterError(CONTROLLER_DIR_UNSET + (f", or set {override}" if override else ""))
    return os.path.join(os.path.expanduser(base), "artifacts")


_UNSET = object()


def reference_var(hostvars, reference, names, default=None):
    """The first of ``names`` the reference host's own variables set (its host vars, its groups'
    vars, extra vars), else ``default``. The reference host's settings (its venv, its capture
    directory) are read from it, not from the target a deploy runs for: an inventory sets them
    on the reference host."""
    names = [names] if isinstance(names, str) else list(names or [])
    try:
        own = hostvars[reference] if reference and reference in hostvars else {}
    except (KeyError, TypeError):
        own = {}
    for name in names:
        value = own.get(name, _UNSET) if hasattr(own, "get") else _UNSET
        if value is not _UNSET and value is not None and str(value).strip():
            return value
    return default


def run_scratch(name) -> str:
    """``<run's temporary directory>/dflash-<name>``: where the controller packs (and, from an
    artifact store host, brings) what it pushes to the hosts, once per run.

    The base is Ansible's own temporary directory of this ``ansible-playbook`` process
    (``DEFAULT_LOCAL_TMP``, under ``ANSIBLE_LOCAL_TEMP``): every serial batch of the run sees
    the same one, and Ansible removes it when the run ends, whatever its outcome. The
    directory is not created here (the task that writes in it does)."""
    label = str(name or "").strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", label) or label in (".", ".."):
        raise AnsibleFilterError(f"run_scratch: {label!r} is not a plain name (letters, digits, '_', '.', '-')")
    return os.path.join(C.DEFAULT_LOCAL_TMP, "dflash-" + label)


def store_host(value, inventory_hosts, variable: str = "dflash_artifact_store_host") -> str:
    """The artifact store host: ``""`` when none is declared (the controller's directory is the
    store), else an inventory host's name. A name the inventory lacks is one line naming the
    variable: delegating to it would connect to a host Ansible knows nothing about."""
    name = str(value or "").strip()
    if name and name not in list(inventory_hosts or []):
        raise AnsibleFilterError(
            f"{variable}: {name} is not a host in the inventory: add it (its address and user, as the targets have "
            f"them), or unset {variable} to keep the artifacts in the controller's store (dflash_controller_dir)")
    return name


# What the store keeps, in a refusal's words, and what else a deploy could do without it.
_STORED = {
    "bundle": ("CUDA bundle ({bundle})", "set cuda_overlay_source=index"),
    "sources": ("DFlash sources (dflash-src.tar)", "deploy with dflash_source=upstream"),
    "uv": ("uv", "set dflash_uv_path to push the controller's uv"),
}


def store_refusal(store, store_dir: str, needed, held, reference: str = "", reference_up: bool = False,
                  uv_on_controller: bool = False, bundle: str = "cuda-cu130.tar") -> str:
    """Why a deploy cannot take what it needs from the artifact store host, in one line; ``""``
    when it can (before any change: the deploy's stage step refuses with it).

    ``needed``: what the deploy takes from the store (``bundle``, ``sources``, ``uv``);
    ``held``: what the store holds, ``None`` when the store host does not answer. What the
    store lacks is staged into it from the reference host (the bundle, the sources) when that
    host answers, and from the controller (uv) when it has one; the rest is refused."""
    store = str(store or "")
    needed = [n for n in (needed or []) if n in _STORED]
    if not store or not needed:
        return ""
    unset = ("or unset dflash_artifact_store_host to deploy from the controller's store "
             "(dflash_controller_dir)")
    if not reference:
        ref = "the inventory has no reference host (group dflash_reference)"
    else:
        ref = f"the reference host {reference} {'answers' if reference_up else 'does not answer'}"
    if held is None:
        if reference == store:
            why = " (dflash_artifact_store_host, also the reference host) does not answer"
        elif reference_up:
            why = (f" (dflash_artifact_store_host) does not answer ({ref}, but a deploy takes "
                   "the staged artifacts from the declared store only)")
        else:
            why = f" (dflash_artifact_store_host) does not answer and {ref}"
        return f"the artifact store host {store}{why}: start {store}, {unset}"
    staged = ("bundle", "sources")
    lacking = [n for n in needed if n not in set(held)
               and not (n in staged and reference and reference_up)
               and not (n == "uv" and uv_on_controller)]
    if not lacking:
        return ""
    what = " and ".join(_STORED[n][0].format(bundle=bundle) for n in lacking)
    why = [ref] if any(n in staged for n in lacking) else []
    if "uv" in lacking:
        why.append("the controller has no uv (dflash_uv_path, or uv on its PATH)")
    if any(n in staged for n in lacking):
        fixes = ["start the reference host and run playbooks/stage_artifacts.yml"]
    else:
        fixes = ["run playbooks/stage_artifacts.yml from a controller that has uv"]
    fixes += [_STORED[n][1] for n in lacking]
    return f"the artifact store {store}:{store_dir} has no {what} and {' and '.join(why)}: {', or '.join(fixes)}"


def stage_refusal(stage_dir: str, needed, reference: str = "", reference_up: bool = False,
                  bundle: str = "cuda-cu130.tar") -> str:
    """Why a deploy cannot have the staged artifacts it needs from the controller's store, in one
    line; ``""`` when it can (before any change: the deploy's stage step refuses with it).

    ``needed``: what the deploy needs and ``stage_dir`` lacks (``bundle``, ``sources``); the
    reference host stages it when it answers."""
    needed = [n for n in (needed or []) if n in ("bundle", "sources")]
    if not needed or (reference and reference_up):
        return ""
    what = " and ".join({"bundle": f"CUDA bundle {bundle}", "sources": "DFlash sources dflash-src/"}[n] for n in needed)
    if reference:
        head = f"the reference host {reference} does not answer (down or unreachable)"
        start = f"start {reference} and run again (the deploy stages them from it)"
    else:
        head = "the inventory has no reference host (group dflash_reference)"
        start = "add the reference host to group dflash_reference and run again"
    fixes = [start, f"copy them into {stage_dir} from a controller that has them",
             "set dflash_artifact_store_host to a host that keeps them"] + [_STORED[n][1] for n in needed]
    return f"{head} and the staged artifacts are missing (no {what} in {stage_dir}): {', or '.join(fixes)}"


class FilterModule:
    def filters(self):
        return {"controller_command": controller_command, "artifact_store": artifact_store,
                "controller_dir_refusal": controller_dir_refusal, "reference_var": reference_var,
                "run_scratch": run_scratch, "store_host": store_host, "store_refusal": store_refusal,
                "stage_refusal": stage_refusal}
