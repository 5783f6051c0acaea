#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: instance_ready
short_description: Wait until an SGLang instance answers /health_generate and serves its model
version_added: "0.1.0"
description:
  - Probes the instance's C(/health_generate) and, once it answers 200, C(/v1/models), until C(/v1/models)
    names O(model) or O(timeout) seconds pass. The first probe is at once; the waits between probes start at
    0.5 s and double up to O(interval).
  - Reads the unit's state with C(systemctl show) before each probe and gives up at once when the unit has
    restarted more than O(max_restarts) times since the wait began (a crash loop under C(Restart=on-failure);
    a unit waiting C(RestartSec) to start again counts as one more restart), or has failed. Without
    C(systemctl) there is no unit state and only the HTTP answers decide.
  - The API key is read on the host from O(env_file) (C(SGLANG_API_KEY), parsed as systemd parses an
    C(EnvironmentFile=)), never from an option or the task's environment, which Ansible prints at C(-vvv)
    and every local user reads in the process list. It is never returned.
  - Before each probe, checks who listens on the port of O(base) (C(/proc/net/tcp), C(/proc/net/tcp6) and
    C(/proc/<pid>/fd)); every process holding a listening socket that covers the address must be in O(unit)'s
    control group (or run as O(user), when given). Nothing listening is an answer like a refused connection; a
    port held by anyone else ends the wait at once, naming the process, its user and command, and neither the
    request nor the key is sent to it. When the instance is not ready, a port someone else holds is named in
    RV(reason).
  - Fails, with RV(reason) as its message and the other fields as when it succeeds, when the instance is not
    ready. Never changes anything; C(changed) is always false. Standard library only on the host.
author:
  - dflash.deploy contributors (@dflash)
options:
  base:
    description:
      - The instance's address on the host, scheme and port, without a path; C(/health_generate) and
        C(/v1/models) are appended. Only C(http://) or C(https://); any other is refused, nothing read.
    type: str
    required: true
  model:
    description:
      - The model the instance must serve, its C(served_model_name); C(/v1/models) must name it. A healthy
        server serving another model (a stale server on the port, a wrong name) is not ready.
    type: str
    required: true
  unit:
    description:
      - The instance's systemd unit, whose restarts and state end the wait early.
    type: str
    required: true
  timeout:
    description:
      - Seconds to wait for readiness. The wait ends after the first probe that finds the time spent. Each
        probe has the time left (at least 1 s, at most 30 s) in all and reads at most 1 MiB; a server that
        drips its answer fails the probe then.
    type: float
    default: 1200
  interval:
    description:
      - The longest wait in seconds between two probes; the waits start at 0.5 s and double up to it. A value
        below 0.5 is every wait.
    type: float
    default: 5
  max_restarts:
    description:
      - Automatic restarts of the unit tolerated while waiting; one more ends the wait at once (a crash loop).
    type: int
    default: 0
  user:
    description:
      - A user whose processes may also hold the port, for a server not run by systemd (the module run alone).
        Without it, only the processes of O(unit) count as the instance.
    type: str
  env_file:
    description:
      - The instance's env file, from which the API key (C(SGLANG_API_KEY)) is read. Without it, or when the
        file or the key is absent, the probes carry no key.
    type: path
notes:
  - Supports check mode. The probes only read, so check mode probes as a real run does.
  - Each HTTP request may take up to 30 s (C(/health_generate) generates a token). Requests go straight to
    O(base), never through a proxy named by the environment, and carry no credentials from C(~/.netrc).
seealso:
  - module: dflash.deploy.release_fingerprint
"""

EXAMPLES = r"""
- name: Wait for the instance
  dflash.deploy.instance_ready:
    base: http://127.0.0.1:30001
    model: qwen3-8b-dflash
    unit: sglang-dflash@qwen3-8b.service
    timeout: 1200
    interval: 5
    env_file: /etc/dflash/qwen3-8b.env
  register: ready
  failed_when: false

- name: Say why it is not ready
  ansible.builtin.debug:
    msg: "not ready after {{ ready.seconds }}s: {{ ready.reason }}"
  when: not ready.ready
"""

RETURN = r"""
ready:
  description: True when C(/health_generate) answered 200 and C(/v1/models) named O(model).
  returned: always
  type: bool
  sample: true
health:
  description: The last status C(/health_generate) answered; null when nothing answered or it was never asked.
  returned: always
  type: int
  sample: 200
models:
  description: What C(/v1/models) named the last time it was asked (only after C(/health_generate) answered 200).
  returned: always
  type: list
  elements: str
  sample: ["qwen3-8b-dflash"]
restarts:
  description: Restarts of the unit since the wait began.
  returned: always
  type: int
  sample: 0
reason:
  description:
    - Why the instance is not ready; null when it is. When the time ran out, C(not ready within <timeout>s:)
      and the last probe's answer.
  returned: always
  type: str
  sample: "not ready within 10s: /health_generate answered nothing: nothing listens on 127.0.0.1:30001"
seconds:
  description: Seconds the wait took.
  returned: always
  type: float
  sample: 46.1
"""

import time
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.host import listener as L
    from ansible_collections.dflash.deploy.plugins.module_utils.host import readiness as R
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base=dict(type="str", required=True),
            model=dict(type="str", required=True),
            unit=dict(type="str", required=True),
            timeout=dict(type="float", default=1200),
            interval=dict(type="float", default=5),
            max_restarts=dict(type="int", default=0),
            env_file=dict(type="path"),
            user=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    base = p["base"].rstrip("/")
    if R.base_error(base):  # a file:// base reads nothing (round 3, m3)
        module.fail_json(msg=R.base_error(base), changed=False)
    try:
        probe = L.guard(R.get, base, p["unit"], p["user"])
    except ValueError as exc:
        module.fail_json(msg=str(exc), changed=False)
    started = time.monotonic()
    try:
        answer = R.wait_ready(base, p["model"], p["unit"], p["timeout"], p["interval"],
                              max_restarts=p["max_restarts"], env_file=p["env_file"], probe=probe).as_dict()
    except L.ForeignListener as exc:
        answer = R.Readiness(ready=False, reason=str(exc), seconds=round(time.monotonic() - started, 1)).as_dict()
    if not answer["ready"]:
        holder = "" if "was not sent" in answer["reason"] else L.holder_text(base, p["unit"], p["user"])
        if holder:
            answer["reason"] += "; " + holder
        module.fail_json(msg=answer["reason"], changed=False, **answer)
    module.exit_json(changed=False, **answer)


if __name__ == "__main__":
    main()
