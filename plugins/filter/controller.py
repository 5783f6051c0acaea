# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller gives a deploy: a command to push, and the artifact store.

    {{ dflash_uv_path | default('uv') | dflash.deploy.controller_command('dflash_uv_path') }}
      ->  the absolute path of that command on the controller
    {{ dflash_controller_dir | default('') | dflash.deploy.artifact_store('stage_artifacts_dir') }}
      ->  <dflash_controller_dir>/artifacts

Filters run on the controller, which is where these live. Nothing here derives a path from the
playbook's directory: from an installed collection, an AWX job or a wrapper playbook that
directory is the collection's install directory or a throwaway one. Each failure is one line
naming the variable to set.
"""
from __future__ import annotations

import os
import shutil

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


class FilterModule:
    def filters(self):
        return {"controller_command": controller_command, "artifact_store": artifact_store}
