#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: worker_drain
short_description: Take one SGLang worker out of its router and wait until it runs no request
version_added: "0.1.0"
description:
  - Before an SGLang instance restarts behind a router (the C(sglang-router) package, read from sglang-router
    0.3.2), removes its URL O(worker) from the router at O(url) so that it gets no new request, then waits until the
    instance's C(GET /v1/loads) reports no request in flight, for at most O(timeout) seconds.
  - In flight is C(aggregate.total_running_reqs), plus C(aggregate.total_waiting_reqs) where the answer has it.
    An instance that does not answer counts as drained (it serves nothing). An answer that is not a load report
    (C(401), C(404) from a server without C(/v1/loads), a body without the count) keeps the wait going until
    O(timeout); RV(reason) says why.
  - Hitting O(timeout) is not a failure; RV(timed_out) says so, and the caller restarts with the requests still
    running.
  - A worker the router does not list is not removed (RV(registered) false), but its requests in flight are still
    waited for, as for a removed one; someone else may have removed it (a registration with
    O(dflash.deploy.router_workers#module:state=exact), an operator) while it still runs what it was sent. A
    router that does not answer at all
    (connection refused or timed out) routes nothing to it either - a managed router not yet installed, for
    example - and is no failure (RV(router_answered) false). A router that answers with an error, or refuses the
    removal, fails the module.
  - The removal is M(dflash.deploy.router_workers)'s O(dflash.deploy.router_workers#module:state=absent) for
    that one URL. Putting the worker back is M(dflash.deploy.router_workers)'s too.
  - Standard library and ansible-core only on the host that runs it.
author:
  - dflash.deploy contributors (@dflash)
options:
  url:
    description: The router's address, C(scheme://host:port).
    type: str
    required: true
  worker:
    description: The worker's URL as the router has it registered, C(scheme://host:port).
    type: str
    required: true
  timeout:
    description: Seconds the wait for the requests in flight may take, after the removal.
    type: float
    default: 120
  interval:
    description: Seconds between two C(GET /v1/loads).
    type: float
    default: 1
  remove_timeout:
    description: Seconds the removal may take, the router's background work included.
    type: float
    default: 60
  env_file:
    description:
      - The instance's env file, read on the host for C(SGLANG_API_KEY), sent as C(Authorization) to
        C(/v1/loads) (as M(dflash.deploy.instance_ready) reads it). Without it, no key is sent.
    type: path
  key_file:
    description:
      - The router's env file on the host, read there for C(SGLANG_ROUTER_CONTROL_PLANE_API_KEY), sent as
        a bearer token (the C(Authorization) header) on the router's worker API calls (as
        O(dflash.deploy.router_workers#module:key_file)).
        Without it, or when no such file exists, no key is sent to the router.
    type: path
notes:
  - Supports check mode (it only reads C(GET /workers) and reports whether it would remove the worker; it does not
    wait).
  - Requests go straight to the router and the instance, never through a proxy named by the environment.
seealso:
  - module: dflash.deploy.router_workers
  - module: dflash.deploy.instance_ready
"""

EXAMPLES = r"""
- name: Take the instance out of its router and let its requests finish
  dflash.deploy.worker_drain:
    url: http://127.0.0.1:30000
    worker: http://127.0.0.1:30001
    timeout: 120
    env_file: /etc/dflash/qwen3-8b.env
    key_file: /etc/dflash/router/qwen3-8b-dflash.env
  register: drained

- name: Put it back once it is ready again
  dflash.deploy.router_workers:
    url: http://127.0.0.1:30000
    workers: [http://127.0.0.1:30001]
    key_file: /etc/dflash/router/qwen3-8b-dflash.env
  when: drained.removed
"""

RETURN = r"""
router:
  description: The router's address as the module used it (normalized).
  returned: always
  type: str
  sample: http://127.0.0.1:30000
worker:
  description: O(worker) normalized.
  returned: always
  type: str
  sample: http://127.0.0.1:30001
timeout:
  description: O(timeout), the wait's bound.
  returned: always
  type: float
  sample: 120.0
router_answered:
  description: Whether the router answered C(GET /workers).
  returned: always
  type: bool
registered:
  description: Whether the router had the worker registered.
  returned: always
  type: bool
removed:
  description: Whether the module removed it (false in check mode).
  returned: always
  type: bool
drained:
  description: Whether the worker ended with no request in flight (or not answering).
  returned: always
  type: bool
timed_out:
  description: Whether the wait hit O(timeout) with requests in flight, or with their count unknown.
  returned: always
  type: bool
seconds:
  description: Seconds from the removal to the end of the wait (0 when nothing was removed).
  returned: always
  type: float
  sample: 3.2
in_flight:
  description: Requests in flight at the last C(/v1/loads) answer (0 for an instance that did not answer; null when
    never known).
  returned: always
  type: int
reason:
  description: Why the count was not known at the end of the wait, or why the router was not read; else null.
  returned: always
  type: str
  sample: GET /v1/loads answered 404
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.host import readiness as R
    from ansible_collections.dflash.deploy.plugins.module_utils.router import client as C
    from ansible_collections.dflash.deploy.plugins.module_utils.router import drain as D
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            worker=dict(type="str", required=True),
            timeout=dict(type="float", default=120),
            interval=dict(type="float", default=1),
            remove_timeout=dict(type="float", default=60),
            env_file=dict(type="path"),
            key_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    for name in ("timeout", "interval", "remove_timeout"):
        if p[name] <= 0:
            module.fail_json(msg="%s must be more than 0 seconds, not %s" % (name, p[name]))
    try:
        result = D.drain(p["url"], p["worker"], p["timeout"], p["interval"], remove_timeout=p["remove_timeout"],
                         key=R.api_key(p["env_file"]), check_mode=module.check_mode, api=C.api_for(p["key_file"]))
    except (ValueError, C.RouterError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
