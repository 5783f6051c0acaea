#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: preflight_info
short_description: Read who holds a port or a GPU process, model directories and free disk space before a deploy
version_added: "0.1.0"
description:
  - Reads, from the host's own C(/proc), what no other module reports about each instance a deploy is about to
    change.
  - Which processes listen on its TCP port (C(/proc/net/tcp) and C(/proc/net/tcp6), matched through every
    process's C(/proc/<pid>/fd)), each with its command name and the systemd unit its cgroup names; the same
    for the GPU processes nvidia-smi listed on its GPUs; which of its model directories hold no C(config.json).
  - Reads the free space of O(base_dir), or of its nearest existing parent when it is not made yet.
  - Lists the host's own uv and pip configuration files (RV(config_files)), which the deploy's uv would ignore.
  - Where another user's C(/proc/<pid>/fd) cannot be read (no C(CAP_SYS_PTRACE), as in containers), a
    listening socket is reported by its uid; it is attributed to the instance's unit only when that uid is
    O(service_user)'s and C(/usr/bin/systemctl is-active) says the unit is active.
  - Never changes anything; C(changed) is always false. Standard library only.
author:
  - dflash.deploy contributors (@dflash)
options:
  base_dir:
    description:
      - The directory a new release is written under; its free space (or its nearest existing parent's) is read.
    type: path
    default: /
  service_user:
    description:
      - The user the instances' units run as. A listening socket of this user's uid whose process cannot be read
        is the instance's own when its unit is active. Unknown on the host (not made yet), no socket is
        attributed by uid.
    type: str
  units:
    description: Each instance's systemd unit, by instance name (C(sglang-dflash@<name>.service)).
    type: dict
    default: {}
  ports:
    description: Each instance's TCP port, by instance name; its listeners are read.
    type: dict
    default: {}
  pids:
    description: By instance name, the list of pids nvidia-smi lists on the instance's GPUs; each is read.
    type: dict
    default: {}
  models:
    description: By instance name, the list of model directories that must hold a C(config.json).
    type: dict
    default: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Reads only; the result is the same with and without check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to show.
  platform:
    support: full
    platforms: posix
    description: Linux hosts (reads C(/proc)).
requirements:
  - Python 3.8 to 3.13 on the managed host (the versions the collection's sanity tests compile and import on).
notes:
  - A port, pid or model list that is not one is refused in one line before anything is read.
seealso:
  - module: dflash.deploy.pkg_probe
"""

EXAMPLES = r"""
- name: Read ports, GPU process owners, model directories and disk space
  dflash.deploy.preflight_info:
    base_dir: /opt/dflash
    service_user: sglang
    units: {qwen3-8b: sglang-dflash@qwen3-8b.service}
    ports: {qwen3-8b: 30001}
    pids: {qwen3-8b: [4242]}
    models: {qwen3-8b: [/srv/models/Qwen3-8B, /srv/models/Qwen3-8B-DFlash-b16]}
  register: preflight

- name: Refuse a port that another process holds
  ansible.builtin.assert:
    that: >-
      preflight.ports['qwen3-8b'] | rejectattr('unit', 'equalto', 'sglang-dflash@qwen3-8b.service')
      | list | length == 0
"""

RETURN = r"""
ports:
  description:
    - By instance name, the processes listening on its port, by pid; then each socket whose process could not
      be read, with C(pid) null, its C(uid), and C(unit) the instance's (C(inferred) V(uid)) or null.
  returned: always
  type: dict
  sample: {"qwen3-8b": [{"pid": 4242, "comm": "python3", "unit": "ddtree-stopgap.service"},
                        {"pid": null, "comm": "a process of uid 999 (not readable here)",
                         "unit": "sglang-dflash@qwen3-8b.service", "uid": 999, "inferred": "uid"}]}
pids:
  description:
    - By instance name, each pid asked about with its command name and systemd unit (null when gone or in none).
  returned: always
  type: dict
  sample: {"qwen3-8b": [{"pid": 5151, "comm": "python3", "unit": null}]}
models:
  description: By instance name, the model directories without a C(config.json); empty when all are there.
  returned: always
  type: dict
  sample: {"qwen3-8b": ["/srv/models/Qwen3-8B-DFlash-b16"]}
config_files:
  description:
    - The host's own uv and pip configuration files (C(/etc/uv/uv.toml), root's C(~/.config/uv/uv.toml),
      C(/etc/pip.conf), root's C(pip.conf), ...), each with what it configures (C(uv) or C(pip)). The deploy runs uv
      with C(UV_NO_CONFIG=1), so it would ignore them; dflash.deploy.host_preflight refuses (or warns about) them.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/uv/uv.toml", "kind": "uv"}]
config_message:
  description: One line naming those files and the variables to set instead; empty when there is none.
  returned: always
  type: str
disk:
  description: The directory whose free space was read (O(base_dir) or its nearest existing parent) and its free GB.
  returned: always
  type: dict
  sample: {"path": "/opt", "free_gb": 812.4}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils import uv_env as U
    from ansible_collections.dflash.deploy.plugins.module_utils.host import preflight as PF
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_dir=dict(type="path", default="/"),
            service_user=dict(type="str"),
            units=dict(type="dict", default={}),
            ports=dict(type="dict", default={}),
            pids=dict(type="dict", default={}),
            models=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    try:
        result = PF.answer(base_dir=p["base_dir"], ports=p["ports"], pids=p["pids"], models=p["models"],
                           units=p["units"], service_user=p["service_user"])
    except PF.PreflightRequestError as exc:
        module.fail_json(msg="preflight_info: %s" % exc, changed=False)
    except OSError as exc:
        module.fail_json(msg="preflight_info could not read %s: %s" % (exc.filename or p["base_dir"],
                                                                       exc.strerror or exc), changed=False)
    found = U.host_config_on_host()
    result.update(config_files=[{"path": path, "kind": kind} for path, kind in found],
                  config_message=U.host_config_error(found))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
