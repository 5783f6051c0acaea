#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: router_workers
short_description: Register and remove the workers of an SGLang router at run time
version_added: "0.1.0"
description:
  - Brings the workers of a running SGLang router (the C(sglang-router) package, its worker API C(GET /workers),
    C(POST /workers), C(DELETE /workers/{id}); read from sglang-router 0.3.2) to O(workers) under O(state),
    without restarting the router.
  - Every URL, wanted or registered, is compared as C(scheme://host:port) (scheme and host lower-case, no
    trailing slash), since the router itself compares them as strings and registers C(http://h:1/) beside
    C(http://h:1) as a second worker of the same server.
  - Additions go first; removals are sent only once every added worker is registered, so a change with O(state=exact)
    that swaps an old instance for a new one never leaves the router with fewer workers than it had, and an
    addition the router refuses removes nothing.
  - The router applies both in the background (it answers 202); the module waits until C(GET /workers) lists
    the added URLs and no longer lists the removed workers, and fails at once, naming the worker, when the
    router gave up on an addition (its job C(failed)). An addition whose server does not answer stays queued
    in the router (it retries for its C(--worker-startup-timeout-secs)); the module fails after O(timeout).
  - A registered worker counts as present whether or not the router finds it healthy (C(healthy) in RV(after)).
    The router keeps an unhealthy worker registered and sends it no requests.
  - Standard library only on the host that runs it.
author:
  - dflash.deploy contributors (@dflash)
options:
  url:
    description:
      - The router's address, C(scheme://host:port) (for example C(http://127.0.0.1:30000)); C(/workers) is
        appended.
    type: str
    required: true
  workers:
    description:
      - Worker URLs, C(scheme://host:port) each (the SGLang instances' addresses as the router reaches them).
        Duplicates, also in another spelling, count once.
    type: list
    elements: str
    default: []
  state:
    description:
      - V(present) registers O(workers) that are not registered and leaves every other worker.
      - V(exact) registers O(workers) and removes every other worker, and every second registration of one
        server. With an empty O(workers) it removes them all.
      - V(absent) removes every registration of O(workers).
    type: str
    choices: [present, exact, absent]
    default: present
  timeout:
    description:
      - Seconds for the whole change, the router's background work included; each request is given at most
        10 s of it.
    type: float
    default: 60
  key_file:
    description:
      - The router's env file on the host, read there for C(SGLANG_ROUTER_CONTROL_PLANE_API_KEY), sent as a bearer
        token (the C(Authorization) header) on every worker API call (a router started with
        C(--control-plane-api-keys), as the managed router of C(dflash.deploy.sglang_router) is, answers 401
        without it). The key is never a module
        option, never on a command line, never in the result.
      - Without it, or when no such file exists (a router deployed before it had a key), no key is sent.
    type: path
notes:
  - Supports check mode (it only reads C(GET /workers) and reports the change it would make) and diff mode (the
    worker URLs before and after, one a line).
  - Requests go straight to O(url), never through a proxy named by the environment.
  - Redirects are not followed (they would carry the key elsewhere).
seealso:
  - module: dflash.deploy.instance_ready
"""

EXAMPLES = r"""
- name: The new instance in, the old one out (an upgrade behind the router)
  dflash.deploy.router_workers:
    url: http://127.0.0.1:30000
    workers:
      - http://127.0.0.1:30002
    state: exact
    timeout: 120

- name: Add a worker, leave the others
  dflash.deploy.router_workers:
    url: http://127.0.0.1:30000
    workers: [http://192.0.2.10:30001]

- name: The managed router's workers, its control-plane key read on the host
  dflash.deploy.router_workers:
    url: http://127.0.0.1:30100
    workers: [http://127.0.0.1:30001]
    key_file: /etc/dflash/router/qwen3-8b-dflash.env

- name: Take a worker out before its restart
  dflash.deploy.router_workers:
    url: http://127.0.0.1:30000
    workers: [http://127.0.0.1:30001]
    state: absent
  register: out

- name: What the router has now
  ansible.builtin.debug:
    msg: "{{ out.after | map(attribute='url') | list }}"
"""

RETURN = r"""
router:
  description: The router's address as the module used it (normalized).
  returned: always
  type: str
  sample: http://127.0.0.1:30000
workers:
  description: O(workers) normalized, duplicates dropped.
  returned: always
  type: list
  elements: str
  sample: ["http://127.0.0.1:30002"]
before:
  description: The router's workers before the change, in its order.
  returned: always
  type: list
  elements: dict
  contains:
    url:
      description: The worker's URL as the router lists it.
      type: str
    id:
      description: The id the router gave the worker (a UUID; null for a worker check mode would add).
      type: str
    healthy:
      description: Whether the router finds the worker healthy (null when unknown).
      type: bool
    model:
      description: The model the router read from the worker (its C(model_id)).
      type: str
  sample: [{"url": "http://127.0.0.1:30001", "id": "ebd1f5b1-44d1-45ae-8886-a79c07de86a1", "healthy": true,
            "model": "qwen3-8b"}]
after:
  description:
    - The router's workers after the change, read from it again; in check mode, the prediction (an added
      worker without an id).
  returned: always
  type: list
  elements: dict
  sample: [{"url": "http://127.0.0.1:30002", "id": "b55ff8d4-8829-49f0-9261-1af37faa80b8", "healthy": true,
            "model": "qwen3-8b"}]
added:
  description: The URLs the module registered (would register in check mode).
  returned: always
  type: list
  elements: str
  sample: ["http://127.0.0.1:30002"]
removed:
  description: The URLs of the workers the module removed (would remove in check mode).
  returned: always
  type: list
  elements: str
  sample: ["http://127.0.0.1:30001"]
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.router import client as C
    from ansible_collections.dflash.deploy.plugins.module_utils.router import sync as S
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            workers=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=["present", "exact", "absent"], default="present"),
            timeout=dict(type="float", default=60),
            key_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    if p["timeout"] <= 0:
        module.fail_json(msg="timeout must be more than 0 seconds, not %s" % p["timeout"])
    try:
        result = S.converge(p["url"], p["workers"], p["state"], p["timeout"], check_mode=module.check_mode,
                            api=C.api_for(p["key_file"]))
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except C.RouterError as exc:
        module.fail_json(msg=str(exc))
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
