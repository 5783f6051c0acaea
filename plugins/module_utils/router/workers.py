# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the SGLang router's workers are and what must change to reach the wanted set: pure functions.

The router (sglang-router 0.3.2) lists its registered workers at ``GET /workers`` as
``{"workers": [{"id": <uuid>, "url": ..., "model_id": ..., "is_healthy": ..., ...}], "total": n}``.
It compares worker URLs as strings: ``http://h:1`` and ``http://h:1/`` are two workers of the same
server, so every URL is brought to one form (``normalize_url``) before it is compared or sent.
A worker's id is a random UUID given when it is added; removing the URL and adding it again
gives it another.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

STATES = ("present", "exact", "absent")


@dataclass(frozen=True)
class Worker:
    """One registered worker as the router lists it; ``id`` and ``healthy`` are None for a worker
    not yet added (the prediction of check mode)."""

    url: str
    id: str | None = None
    healthy: bool | None = None
    model: str | None = None

    def as_dict(self):
        return {"url": self.url, "id": self.id, "healthy": self.healthy, "model": self.model}


@dataclass(frozen=True)
class Plan:
    """The URLs to add (in the order asked) and the registered workers to remove."""

    add: tuple = ()
    remove: tuple = ()

    @property
    def empty(self):
        return not self.add and not self.remove


def normalize_url(url):
    """``scheme://host:port`` of a worker or router address: the scheme and host lower-case, no
    trailing slash. Raises ValueError naming the address when it is not an http(s) URL without a path,
    query or credentials."""
    text = url.strip() if isinstance(url, str) else ""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError("%r is not a URL: %s" % (url, exc)) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("%r is not an http:// or https:// URL with a host" % (url,))
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("%r has a path, query or credentials; a worker is scheme://host:port only" % (url,))
    host = parts.hostname.lower()
    if ":" in host:
        host = "[%s]" % host
    return "%s://%s%s" % (parts.scheme.lower(), host, "" if port is None else ":%d" % port)


def wanted_urls(urls):
    """The wanted worker URLs normalized, duplicates dropped, first occurrence's order kept."""
    seen = []
    for url in urls or ():
        norm = normalize_url(url)
        if norm not in seen:
            seen.append(norm)
    return seen


def parse_workers(payload):
    """The workers of a ``GET /workers`` answer, in the router's order. Raises ValueError when the
    answer is not that shape."""
    if not isinstance(payload, dict) or not isinstance(payload.get("workers"), list):
        raise ValueError("the answer has no list 'workers'")
    workers = []
    for entry in payload["workers"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) or not entry.get("id"):
            raise ValueError("a worker without 'id' and 'url': %r" % (entry,))
        healthy = entry.get("is_healthy")
        workers.append(Worker(url=entry["url"], id=str(entry["id"]),
                              healthy=healthy if isinstance(healthy, bool) else None,
                              model=entry.get("model_id") if isinstance(entry.get("model_id"), str) else None))
    return workers


def _same(worker):
    """The worker's URL normalized, or its URL as listed when it is not one the router could reach."""
    try:
        return normalize_url(worker.url)
    except ValueError:
        return worker.url


def plan(current, wanted, state):
    """What to change so that ``current`` (registered ``Worker``s) meets ``wanted`` (normalized URLs):
    ``present`` adds the missing ones and leaves the others; ``exact`` also removes every other worker and
    every second registration of a wanted server (``http://h:1/`` beside ``http://h:1``), keeping the one
    spelled as normalized; ``absent`` removes every registration of the wanted ones."""
    if state not in STATES:
        raise ValueError("state must be one of %s, not %r" % (", ".join(STATES), state))
    if state == "absent":
        return Plan(remove=tuple(w for w in current if _same(w) in wanted))
    registered = {_same(w) for w in current}
    add = tuple(url for url in wanted if url not in registered)
    if state == "present":
        return Plan(add=add)
    keep = {}
    for w in current:
        url = _same(w)
        if url in wanted and (url not in keep or (keep[url].url != url and w.url == url)):
            keep[url] = w
    kept = {w.id for w in keep.values()}
    return Plan(add=add, remove=tuple(w for w in current if w.id not in kept))


def predicted(current, the_plan):
    """The workers after ``the_plan`` as check mode reports them: the removed ones gone, the added ones
    at the end without an id."""
    gone = {w.id for w in the_plan.remove}
    return [w for w in current if w.id not in gone] + [Worker(url=url) for url in the_plan.add]


def changed(before, after):
    """Whether the registrations differ: a worker added, removed, or one URL registered again under
    another id."""
    return sorted((w.url, w.id or "") for w in before) != sorted((w.url, w.id or "") for w in after)


def diff(router, before, after):
    """Ansible's diff of the worker URLs, one a line, before and after."""
    def text(workers):
        return "".join(w.url + "\n" for w in workers)
    return {"before": text(before), "after": text(after),
            "before_header": router + "/workers", "after_header": router + "/workers"}
