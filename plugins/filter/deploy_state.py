# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast path's two halves on the controller (roles/deploy_state).

    {{ hostvars[inventory_hostname] | dflash.deploy.deploy_key }}
      ->  {collection, vars, artifacts}: digests of this host's deploy inputs (module_utils/converged/key.py)
    {{ instances | dflash.deploy.deploy_state_request(config_files, layout, settings) }}
      ->  what a completed deploy records on the host (deploy_state state=recorded): files, dirs,
          trees, units, accounts, instances

The key is computed before anything runs on the host; the request after the deploy completed, from
what its roles decided (the configuration files sglang_service wrote, the layout host_preflight
keeps, the release sglang_venv built).
"""
from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError
from ansible_collections.dflash.deploy.plugins.filter.controller import artifact_store, controller_command
from ansible_collections.dflash.deploy.plugins.module_utils.converged import key as K

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def deploy_key(hostvars, collection_root=COLLECTION_ROOT):
    """Digests of the deploy's inputs as this host sees them. A variable that does not template
    leaves its part out ({'error': why}), and the fast path is not taken: the full run then fails
    on that variable with its own message."""
    try:
        names = K.product_var_names(list(hostvars.keys()))
        values = dict((name, hostvars[name]) for name in names)
    except Exception as exc:  # pylint: disable=broad-except  # any templating error: no fast path, full run says why
        return {"error": "the deploy's variables could not be read: %s" % str(exc).splitlines()[0]}
    store = artifact_store(values["dflash_controller_dir"]) if values.get("dflash_controller_dir") else ""
    uv = controller_command(values.get("sglang_venv_uv_controller_path", values.get("dflash_uv_path", "uv")),
                            required=False)
    return {"collection": K.collection_sha256(collection_root),
            "vars": K.vars_sha256(values),
            "artifacts": K.artifacts_sha256(K.controller_paths(values, store, uv))}


def deploy_state_request(instances, config_files, layout, settings):
    """What deploy_state records after a completed deploy.

    ``instances``: sglang_service's present instances (name, port, served_model_name, model_path,
    draft_model_path). ``config_files``: the paths of the files sglang_service renders
    (sglang_service_files). ``layout``: the directories host_preflight keeps (host_preflight_layout:
    ``root``, ``shared`` and ``service`` paths). ``settings``: base_dir, config_dir, release_dir,
    uv_path, user, group."""
    for name in ("base_dir", "config_dir", "release_dir", "uv_path", "user", "group"):
        if not settings.get(name):
            raise AnsibleFilterError("deploy_state_request: %s is empty (the deploy did not complete)" % name)
    base, release = settings["base_dir"], settings["release_dir"]
    files = list(config_files)
    files += [settings["uv_path"], release + "/.dflash-release/verified.json"]
    dirs = list(layout.get("root") or []) + list(layout.get("shared") or []) + list(layout.get("service") or [])
    units = []
    reported = []
    for inst in instances:
        files += ["%s/instances/%s/%s" % (base, inst["name"], link) for link in ("current", "previous")]
        # absent after every completed run: present, it is a surge worker an interrupted run left,
        # which only the full path takes down (sglang_service's surge_leftovers.yml)
        files.append("%s/%s.surge.env" % (settings["config_dir"], inst["name"]))
        for key in ("model_path", "draft_model_path"):
            if inst.get(key):
                files.append(inst[key].rstrip("/") + "/config.json")
        units.append("sglang-dflash@%s.service" % inst["name"])
        reported.append({"name": inst["name"], "port": int(inst["port"]),
                         "served_model_name": inst["served_model_name"],
                         "env_file": "%s/%s.env" % (settings["config_dir"], inst["name"])})
    return {"files": sorted(set(files)), "dirs": sorted(set(dirs)), "trees": [release], "units": units,
            "users": [settings["user"]], "groups": [settings["group"]], "instances": reported}


class FilterModule:
    def filters(self):
        return {"deploy_key": deploy_key, "deploy_state_request": deploy_state_request}
