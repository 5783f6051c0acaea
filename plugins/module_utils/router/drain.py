# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``worker_drain``'s logic: one worker taken out of its router, then a wait until it runs no request.

The instance's load is SGLang's ``GET /v1/loads``: ``{"loads": [{"dp_rank", "num_running_reqs",
"num_waiting_reqs", ...}], "aggregate": {"total_running_reqs", "total_waiting_reqs", "total_reqs", ...}}``.
The worker is drained when ``aggregate.total_running_reqs`` is 0 and, where the answer has it,
``aggregate.total_waiting_reqs`` too (a queued request dies with the restart as a running one does). An
instance that does not answer at all counts as drained: it serves nothing. An answer that is not a load
report (401, 404 from a server without the endpoint, a body without the field) keeps the wait going until
its bound, and the result says why.

The decisions are pure functions (``parse_loads``, ``in_flight``, ``decide``); ``wait_drained`` runs the
loop and ``drain`` the whole step, the router's I/O ``client``'s and ``sync``'s, the instance's a ``probe``,
the clock and the sleep replaceable for tests.
"""

from __future__ import annotations

import json
import time

from ansible_collections.dflash.deploy.plugins.module_utils.host import readiness as R
from ansible_collections.dflash.deploy.plugins.module_utils.router import client as C
from ansible_collections.dflash.deploy.plugins.module_utils.router import sync as S
from ansible_collections.dflash.deploy.plugins.module_utils.router import workers as W

DRAINED, WAIT, TIMED_OUT = "drained", "wait", "timed_out"
PROBE_TIMEOUT = 5.0  # seconds one GET /v1/loads may take


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_loads(text):
    """``(running, waiting)`` of a ``GET /v1/loads`` body: ``aggregate.total_running_reqs`` and
    ``aggregate.total_waiting_reqs`` (None when the answer has no such count). Raises ValueError, saying
    what is missing, when the body has no running-request count."""
    try:
        payload = json.loads(text)
    except (TypeError, ValueError):
        raise ValueError("the answer is not JSON") from None
    aggregate = payload.get("aggregate") if isinstance(payload, dict) else None
    if not isinstance(aggregate, dict):
        raise ValueError("the answer has no object 'aggregate'")
    running = _count(aggregate.get("total_running_reqs"))
    if running is None:
        raise ValueError("the answer has no count aggregate.total_running_reqs")
    return running, _count(aggregate.get("total_waiting_reqs"))


def in_flight(status, text):
    """``(requests in flight or None, why not known)`` of one probe: ``status`` None when the instance did not
    answer (nothing in flight: it serves nothing), else its HTTP status and ``text`` its body."""
    if status is None:
        return 0, None
    if status != 200:
        return None, "GET /v1/loads answered %s" % status
    try:
        running, waiting = parse_loads(text)
    except ValueError as exc:
        return None, "GET /v1/loads: %s" % exc
    return running + (waiting or 0), None


def decide(count, elapsed, timeout):
    """DRAINED when nothing is in flight, else TIMED_OUT once ``elapsed`` reached ``timeout``, else WAIT;
    ``count`` None (not known) is not drained."""
    if count == 0:
        return DRAINED
    return TIMED_OUT if elapsed >= timeout else WAIT


def probe_loads(worker, key="", timeout=PROBE_TIMEOUT):
    """``(status, body)`` of ``GET <worker>/v1/loads`` (with the API key when there is one); status None when
    nothing answered."""
    return R.get(worker + "/v1/loads", key, timeout=timeout)


def wait_drained(worker, timeout, interval, key="", probe=probe_loads, clock=time.monotonic, sleep=time.sleep):
    """Poll the worker's load every ``interval`` seconds until nothing is in flight or ``timeout`` passed.
    ``{drained, timed_out, seconds, in_flight, answered, reason}``: ``in_flight`` the last count known
    (None when never known), ``answered`` whether the last probe got an answer, ``reason`` why the count was
    not known (None when it was)."""
    start = clock()
    while True:
        status, text = probe(worker, key)
        count, reason = in_flight(status, text)
        elapsed = clock() - start
        verdict = decide(count, elapsed, timeout)
        if verdict != WAIT:
            return {"drained": verdict == DRAINED, "timed_out": verdict == TIMED_OUT,
                    "seconds": round(elapsed, 1), "in_flight": count, "answered": status is not None,
                    "reason": reason}
        sleep(max(0.0, min(interval, timeout - elapsed)))


def _registered(base, worker, api):
    """The router's registrations of ``worker`` (a list of Worker); RouterError when the router does not answer
    or answers what is not a worker list."""
    answer = api.list_workers(base, timeout=S.REQUEST_TIMEOUT)
    try:
        current = W.parse_workers(answer)
    except ValueError as exc:
        raise C.RouterError("the router at %s answered GET /workers with what is not a worker list: %s"
                            % (base, exc)) from None
    return [w for w in current if S._valid(w.url) and W.normalize_url(w.url) == worker]


def drain(router, worker, timeout, interval, remove_timeout=60.0, key="", check_mode=False, api=C,
          probe=probe_loads, clock=time.monotonic, sleep=time.sleep):
    """The module's result: ``router``, ``worker`` (normalized), ``timeout`` (the bound), ``registered``
    (whether the router had it), ``removed``, ``changed``, ``drained``, ``timed_out``, ``seconds`` (from the
    removal to the end of the wait), ``in_flight``, ``reason``, ``router_answered``. A router that does not
    answer the first ``GET /workers`` at all routes nothing to the worker: nothing is removed or awaited
    (``router_answered`` false, ``reason`` its error). A worker the router does not list is not removed, and
    its requests in flight are still waited for. Raises ValueError for a bad URL and RouterError when
    the router answered what is not a worker list or refused the removal."""
    base, url = W.normalize_url(router), W.normalize_url(worker)
    result = {"router": base, "worker": url, "timeout": timeout, "registered": False, "removed": False,
              "changed": False, "drained": False, "timed_out": False, "seconds": 0.0, "in_flight": None, "reason": None,
              "router_answered": True}
    try:
        listed = _registered(base, url, api)
    except C.RouterUnreachable as exc:
        result.update(router_answered=False, reason=str(exc))
        return result
    result.update(registered=bool(listed), changed=bool(listed))
    if check_mode:
        return result
    start = clock()
    if listed:
        S.converge(base, [url], "absent", timeout=remove_timeout, api=api, clock=clock, sleep=sleep)
        result["removed"] = True
    # A worker the router no longer lists may still run what it was sent before someone else removed
    # it (a registration with state exact, an operator): its requests are waited for all the same.
    result.update(wait_drained(url, timeout, interval, key=key, probe=probe, clock=clock, sleep=sleep))
    result["seconds"] = round(clock() - start, 1)
    return result
