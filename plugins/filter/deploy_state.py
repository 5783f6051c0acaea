# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast path's two halves on the controller (roles/deploy_state).

    {{ hostvars[inventory_hostname] | dflash.deploy.deploy_key }}
      ->  {collection, vars, artifacts}: digests of this host's deploy inputs (module_utils/converged/key.py)
    {{ instances | dflash.deploy.deploy_state_request(config_files, layout, settings) }}
      ->  what a completed deploy records on the host (deploy_state state=recorded): files, dirs,
          trees, units, accounts, instances
    {{ hostvars[inventory_hostname] | dflash.deploy.deploy_state_lock_command }}
      ->  the package lock command sglang_venv will run (package_lock.yml), for the check to run
          instead of any command a record could name
    {{ deploy_state_file | dflash.deploy.deploy_state_file_error }}
      ->  '' or why the record may not live there (only in the collection's own directory)

The key is computed before anything runs on the host; the request after the deploy completed, from
what its roles decided (the configuration files sglang_service wrote, the layout host_preflight
keeps, the release sglang_venv built).
"""
from __future__ import annotations

import os
import shlex

from ansible.errors import AnsibleFilterError
from ansible_collections.dflash.deploy.plugins.filter.controller import artifact_store, controller_command
from ansible_collections.dflash.deploy.plugins.module_utils import uv_env as U
from ansible_collections.dflash.deploy.plugins.module_utils.converged import key as K
from ansible_collections.dflash.deploy.plugins.module_utils.converged import store as S

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


# What sglang_venv's lock command reads, with its role defaults (roles/sglang_venv/defaults/main.yml,
# host_layout's base directory): role defaults are not visible before that role runs.
LOCK_VARS = ("host_layout_base_dir", "dflash_source", "sglang_venv_base_dir", "sglang_venv_uv_path",
             "sglang_venv_python", "sglang_venv_dflash_source", "sglang_venv_sglang_version",
             "sglang_venv_overlay_base", "sglang_venv_requirements", "sglang_venv_source", "sglang_venv_index_url",
             "sglang_venv_extra_index_urls", "dflash_proxy_env", "sglang_venv_proxy_env")
LOCK_SCRIPT = """set -euo pipefail
uv=%s
py=$("$uv" python find --system %s)
echo "$py"
"$py" -c 'import sys; print("%%d.%%d" %% sys.version_info[:2])'
"$uv" pip compile --quiet --no-header --generate-hashes --python "$py" %s -
"""


def lock_command(values):
    """sglang_venv_lock_command (roles/sglang_venv/tasks/package_lock.yml, its env from uv.yml) built from
    ``values`` (the variables set for the host) and the role defaults; a test renders both and compares."""
    base = values.get("sglang_venv_base_dir", values.get("host_layout_base_dir", "/opt/dflash"))
    dflash_source = values.get("sglang_venv_dflash_source", values.get("dflash_source", "upstream"))
    requirements = values["sglang_venv_requirements"] if "sglang_venv_requirements" in values else (
        ["sglang==" + str(values.get("sglang_venv_sglang_version", "0.5.11"))] if dflash_source == "upstream"
        else [values.get("sglang_venv_overlay_base", "sglang[all]==0.5.9")])
    # the indexes and proxies reach uv through its environment, never its command line (security m4)
    if values.get("sglang_venv_source", "index") == "wheelhouse":
        index_args, index_env = ["--no-index", "--find-links", base + "/artifacts/wheelhouse"], {}
    else:
        index_args = []
        index_env = U.index_env(values.get("sglang_venv_index_url", ""), values.get("sglang_venv_extra_index_urls"))
    index_env.update(values.get("sglang_venv_proxy_env", values.get("dflash_proxy_env")) or {})
    script = LOCK_SCRIPT % (shlex.quote(values.get("sglang_venv_uv_path", base + "/tools/uv")),
                            shlex.quote(str(values.get("sglang_venv_python", "python3"))),
                            " ".join(shlex.quote(a) for a in index_args))
    return {"argv": ["/bin/bash", "-c", script], "stdin": "\n".join(str(r) for r in requirements),
            "env": dict({"UV_CACHE_DIR": base + "/cache/uv", "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1",
                         "UV_NO_PROGRESS": "1"}, **index_env)}


def deploy_state_lock_command(hostvars):
    """The lock command this run's sglang_venv will run, named before the check; {} when a variable it
    reads does not template (the check then answers not converged, and the full run says why)."""
    try:
        return lock_command(dict((name, hostvars[name]) for name in LOCK_VARS if name in hostvars))
    except Exception:  # pylint: disable=broad-except  # any templating error: no fast path
        return {}


def deploy_state_file_error(path):
    """'' when ``path`` may be the record, else why not (one line)."""
    return S.path_error(path) or ""


class FilterModule:
    def filters(self):
        return {"deploy_key": deploy_key, "deploy_state_request": deploy_state_request,
                "deploy_state_lock_command": deploy_state_lock_command,
                "deploy_state_file_error": deploy_state_file_error}
