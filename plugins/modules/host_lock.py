#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: host_lock
short_description: Take or release the host lock that lets one dflash.deploy run at a time change a host
version_added: "0.1.0"
description:
  - With O(state=present), writes this run's token file (O(token_prefix) followed by O(token), holding the
    token and O(holder)) and starts a detached holder process under the fixed C(PATH)
    C(/usr/sbin:/usr/bin:/sbin:/bin), C(/usr/bin/timeout <max_age> /usr/bin/flock -w <wait> -E 75 <lock_path>
    /bin/sh -c ...), with O(max_age), O(wait) and O(lock_path) in their places. Holding the flock, the holder
    writes C(<token> <holder>, holding it as pid <flock's pid> on <host>) to O(owner_path) and lives as long as
    the token file exists; C(timeout) ends it after O(max_age) seconds, for a run that died without releasing
    the lock.
  - The holder runs in a session of its own, from C(/), with stdin, stdout and stderr on C(/dev/null) and no
    other descriptor open, so it does not keep the SSH session open and survives the module's exit.
  - The module then waits, on the host's monotonic clock, until O(owner_path) names the token. When the
    holder gives up after O(wait) seconds (or the wait runs a few seconds past it), the module removes its
    token, ends its holder and fails with one line naming the run that holds the lock.
  - With O(state=absent), removes the token file; the holder exits within a second and the lock is free.
  - Standard library only on the host, besides util-linux's C(flock) and coreutils' C(timeout).
author:
  - dflash.deploy contributors (@dflash)
options:
  state:
    description:
      - V(present) takes the lock for O(token) (nothing is started when the token already holds it); V(absent)
        releases it.
    type: str
    choices: [present, absent]
    default: present
  token:
    description:
      - This run's token, one word of letters, digits, C(.), C(_) and C(-) (at most 128 characters). It ends
        the token file's name and is the first word of the holder text.
    type: str
    required: true
  holder:
    description:
      - Who takes the lock, one line after the token in the holder text (for example the controller's
        user@host, the ansible-playbook pid and the play). Never a command line, which may carry secrets.
      - Required with O(state=present).
    type: str
  host:
    description:
      - The host's name in the holder text and the failure message (the inventory name, for example).
      - Left out, the name the host gives itself.
    type: str
  wait:
    description: Seconds to wait for a lock another run holds, before failing.
    type: int
    default: 600
  max_age:
    description:
      - Seconds after which the holder ends and the lock is free even though its token was not removed (a run
        that died). Must be longer than O(wait).
    type: int
    default: 14400
  lock_path:
    description: The file the holder takes the flock on.
    type: path
    default: /run/dflash-deploy.lock
  owner_path:
    description: The file the holder writes the holder text to once it holds the lock.
    type: path
    default: /run/dflash-deploy.owner
  token_prefix:
    description: The token file's path without the token.
    type: str
    default: /run/dflash-deploy.token-
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Writes and starts nothing, waits for nothing; RV(holder) is who holds the lock now and C(changed)
      says whether a real run would take or release it.
  diff_mode:
    support: full
    description: The holder text before and after.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with C(/usr/bin/flock) (util-linux) and C(/usr/bin/timeout) (coreutils).
requirements:
  - Python 3.8 to 3.13 on the managed host (the versions the collection's sanity tests compile and import on).
notes:
  - The lock is transient, for one run; a role using it may report it as unchanged (C(changed_when=false)).
  - When a run died, its holder keeps the lock until O(max_age) seconds after it was taken; removing that
    run's token file on the host frees it at once.
seealso:
  - name: flock(1)
    description: The util-linux command that holds the lock.
    link: https://man7.org/linux/man-pages/man1/flock.1.html
"""

EXAMPLES = r"""
- name: Take the host lock for this run
  dflash.deploy.host_lock:
    token: "{{ lock_token }}"
    holder: "from ops@controller (ansible-playbook pid 4242, play 'Deploy')"
    host: "{{ inventory_hostname }}"
    wait: 600
    max_age: 14400

- name: Release it
  dflash.deploy.host_lock:
    token: "{{ lock_token }}"
    state: absent
"""

RETURN = r"""
held:
  description: Whether O(token) holds the lock now (with O(state=absent), whether it held it before).
  returned: always
  type: bool
  sample: true
holder:
  description: The holder text O(owner_path) holds (empty when there is none).
  returned: always
  type: str
  sample: >-
    20261201T101500-42 from ops@controller (ansible-playbook pid 4242, play 'Deploy'), holding it as pid 777 on ct200
seconds:
  description: Seconds waited for the lock, on the monotonic clock.
  returned: always
  type: float
  sample: 0.5
pid:
  description: The pid of the C(flock) process holding the lock for O(token); null when it does not hold it.
  returned: always
  type: int
  sample: 777
token_path:
  description: The token file's path.
  returned: always
  type: str
  sample: /run/dflash-deploy.token-20261201T101500-42
"""

import os
import socket
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.host import lock as HL
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def _diff(before, after):
    return dict(before="holder: %s\n" % (before or "none"), after="holder: %s\n" % (after or "none"))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            token=dict(type="str", required=True, no_log=False),  # a run's name, not a secret
            holder=dict(type="str"),
            host=dict(type="str"),
            wait=dict(type="int", default=600),
            max_age=dict(type="int", default=14400),
            lock_path=dict(type="path", default="/run/dflash-deploy.lock"),
            owner_path=dict(type="path", default="/run/dflash-deploy.owner"),
            token_prefix=dict(type="str", default="/run/dflash-deploy.token-", no_log=False),
        ),
        required_if=[("state", "present", ("holder",))],
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    host = p["host"] or socket.gethostname()
    try:
        path = HL.token_path(p["token_prefix"], p["token"])
    except HL.LockError as exc:
        module.fail_json(msg="host_lock: %s" % exc, changed=False)
    before = HL.read_holder(p["owner_path"])
    if p["state"] == "absent":
        held = HL.holds(before, p["token"])
        existed = os.path.lexists(path)
        if existed and not module.check_mode:
            try:
                HL.drop(path)
            except OSError as exc:
                module.fail_json(msg="host_lock could not remove %s: %s" % (path, exc.strerror or exc), changed=False)
        result = dict(changed=existed, held=held, holder=before, seconds=0.0, pid=None, token_path=path)
        if module._diff:
            result["diff"] = _diff(before, "" if held and existed else before)
        module.exit_json(**result)
    try:
        taken = HL.take(p["token"], p["holder"], host, p["wait"], p["max_age"], lock=p["lock_path"],
                        owner=p["owner_path"], prefix=p["token_prefix"], check_mode=module.check_mode)
    except HL.LockError as exc:
        module.fail_json(msg="host_lock: %s" % exc, changed=False)
    except OSError as exc:
        module.fail_json(msg="host_lock could not write %s: %s" % (exc.filename or path, exc.strerror or exc),
                         changed=False)
    result = dict(changed=taken.changed, held=taken.held, holder=taken.holder, seconds=taken.seconds,
                  pid=taken.pid, token_path=path)
    if module._diff:
        result["diff"] = _diff(before, taken.holder)
    if taken.msg:
        module.fail_json(msg=taken.msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
