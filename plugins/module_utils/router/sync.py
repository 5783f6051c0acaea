# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``router_workers``'s whole logic: read the router's workers, plan, apply, wait, read again.

Additions go first and removals only once every added worker is registered, so ``state: exact``
swapping an old instance for a new one never leaves the router with fewer workers than it had, and an
addition the router refuses removes nothing. The router queues both (202) and applies them in the
background; the wait polls ``GET /workers`` until the added URLs are listed and the removed ids are not,
reading an unlisted addition's job to fail at once when the router gave up on it. The I/O is
``client``'s; the clock and the sleep are replaceable for tests.
"""

from __future__ import annotations

import time

from ansible_collections.dflash.deploy.plugins.module_utils.router import client as C
from ansible_collections.dflash.deploy.plugins.module_utils.router import workers as W

REQUEST_TIMEOUT = 10.0


def _read(router, timeout, api):
    answer = api.list_workers(router, timeout=timeout)
    try:
        return W.parse_workers(answer)
    except ValueError as exc:
        raise C.RouterError("the router at %s answered GET /workers with what is not a worker list: %s"
                            % (router, exc)) from None


def _wait(router, added, removed, timeout, api, clock, sleep, start):
    """The workers once every ``added`` (url -> job id) is listed and no ``removed`` id is; RouterError
    when the router gave up on an addition or ``timeout`` passed."""
    pause = 0.25
    while True:
        left = timeout - (clock() - start)
        current = _read(router, max(1.0, min(REQUEST_TIMEOUT, left)), api)
        listed = {W.normalize_url(w.url) for w in current if _valid(w.url)}
        ids = {w.id for w in current}
        missing = [url for url in added if url not in listed]
        staying = [w for w in removed if w.id in ids]
        if not missing and not staying:
            return current
        for url in missing:
            status, message = api.job_status(router, added[url], timeout=max(1.0, min(REQUEST_TIMEOUT, left)))
            if status == "failed":
                raise C.RouterError("the router at %s refused worker %s: %s"
                                    % (router, url, message or "its job failed"))
        if clock() - start >= timeout:
            what = ["worker %s not registered (its job: %s)"
                    % (url, api.job_status(router, added[url])[0] or "none") for url in missing]
            what += ["worker %s (%s) not removed" % (w.url, w.id) for w in staying]
            raise C.RouterError("the router at %s did not apply the change within %gs: %s"
                                % (router, timeout, "; ".join(what)))
        sleep(min(pause, max(0.0, timeout - (clock() - start))))
        pause = min(pause * 2, 2.0)


def _valid(url):
    try:
        W.normalize_url(url)
        return True
    except ValueError:
        return False


def converge(router, workers, state="present", timeout=60.0, check_mode=False, api=C, clock=time.monotonic,
             sleep=time.sleep):
    """The module's result without ``changed``'s siblings from Ansible: ``before``/``after`` (lists of worker
    dicts), ``added``/``removed`` (URLs), ``changed``, ``diff``. Raises ValueError for a bad option and
    RouterError for a router that does not answer or refuses."""
    start = clock()
    base = W.normalize_url(router)
    wanted = W.wanted_urls(workers)
    before = _read(base, max(1.0, min(REQUEST_TIMEOUT, timeout)), api)
    the_plan = W.plan(before, wanted, state)
    if check_mode or the_plan.empty:
        after = W.predicted(before, the_plan)
    else:
        added = {url: api.add_worker(base, url, timeout=REQUEST_TIMEOUT) for url in the_plan.add}
        if added:
            _wait(base, added, (), timeout, api, clock, sleep, start)
        removed = tuple(w for w in the_plan.remove
                        if api.remove_worker(base, w.id, w.url, timeout=REQUEST_TIMEOUT))
        after = _wait(base, {}, removed, timeout, api, clock, sleep, start) if removed else _read(
            base, REQUEST_TIMEOUT, api)
    return {
        "router": base,
        "state": state,
        "workers": wanted,
        "before": [w.as_dict() for w in before],
        "after": [w.as_dict() for w in after],
        "added": list(the_plan.add),
        "removed": [w.url for w in the_plan.remove],
        "changed": W.changed(before, after),
        "diff": W.diff(base, before, after),
    }
