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


def controller_command(value, variable: str = "dflash_uv_path") -> str:
    """The absolute path of a command on the controller.

    A value holding a ``/`` is a path (``~`` expanded, relative paths taken from the
    controller's working directory) and must be an executable file. A bare name is looked
    up on the controller's PATH, as a shell would (``shutil.which``)."""
    name = str(value or "").strip()
    if not name:
        raise AnsibleFilterError(f"{variable} is empty: set it to a binary on the controller")
    if "/" in name:
        path = os.path.abspath(os.path.expanduser(name))
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise AnsibleFilterError(f"{variable}: {path} is not an executable file on the controller: "
                                     f"set {variable} to the binary's path")
        return path
    found = shutil.which(name)
    if not found:
        raise AnsibleFilterError(f"no {name!r} on the controller's PATH ({os.environ.get('PATH', '')}): "
                                 f"install it there, or set {variable} to its path")
    return os.path.abspath(found)


def artifact_store(controller_dir, override: str = "stage_artifacts_dir") -> str:
    """``<controller_dir>/artifacts``, the controller directory that keeps staged artifacts
    (the CUDA bundle, the DFlash sources). ``controller_dir`` is ``dflash_controller_dir``:
    it has no default, because a default would have to guess where the controller keeps
    things (an AWX job's directory is gone when the job ends)."""
    base = str(controller_dir or "").strip()
    if not base:
        raise AnsibleFilterError(
            "dflash_controller_dir is not set: set it in the inventory to a controller directory that "
            f"keeps staged artifacts and survives the run, or set {override}")
    return os.path.join(os.path.expanduser(base), "artifacts")


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


class FilterModule:
    def filters(self):
        return {"controller_command": controller_command, "artifact_store": artifact_store,
                "run_scratch": run_scratch}
