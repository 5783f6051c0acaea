"""router/client.py against a router on 127.0.0.1 that drips its answer (round 3, M1), and an address that is
not http(s) (m3): each request ends at its deadline or its size bound, in one line."""
from __future__ import annotations

import time

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.router import client as C
from drip_server import drip_server


@pytest.mark.parametrize(("length", "why"), [
    (1000, "no complete answer within 1s (the deadline of the whole exchange)"),
    (10 << 20, "GET {router}/workers answered 200 with 10485760 bytes, more than the 8388608 read here"),
])
def test_a_dripping_router_does_not_answer(length, why):
    with drip_server(length=length) as (router, _server):
        start = time.monotonic()
        with pytest.raises(C.RouterUnreachable) as caught:
            C.list_workers(router, timeout=1)
        assert time.monotonic() - start < 3
    assert str(caught.value) == f"the router at {router} does not answer GET /workers: " + why.format(router=router)


@pytest.mark.parametrize("router", ["file:///etc", "ftp://127.0.0.1:1", "127.0.0.1:1"])
def test_an_address_that_is_not_http_is_refused(router):
    with pytest.raises(C.RouterError, match=r"^router address .* is not an http:// or https:// URL$") as caught:
        C.request(router, "GET", "/workers")
    assert not isinstance(caught.value, C.RouterUnreachable)
