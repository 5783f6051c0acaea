"""perf/probe.py: the plan and its identity, the request body, the event stream parsed and timed,
and ``stream_one``/``run`` against an HTTP server on 127.0.0.1 in this process that streams
SGLang's chunks at set delays (tests/support/perf_server.py)."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.perf import probe as P
from perf_server import sglang_stream


def test_default_plan_and_its_request():
    plan = P.make_plan()
    assert plan.prompts == P.DEFAULT_PROMPTS and plan.max_tokens == 64 and plan.warmup == 1
    assert P.request_body(plan, "Hi") == {"text": "Hi", "stream": True, "sampling_params": {
        "max_new_tokens": 64, "temperature": 0, "ignore_eos": True}}
    ids = P.make_plan([[1, 2, 3]], max_tokens=8)
    assert P.request_body(ids, ids.prompts[0])["input_ids"] == [1, 2, 3]
    assert plan.as_dict() == {"endpoint": "/generate", "prompts": 4, "max_tokens": 64, "warmup": 1,
                              "digest": P.identity(plan)}


def test_identity_covers_every_request_and_the_warmup():
    plan = P.make_plan(["a", "b"], 16, 1)
    same = P.make_plan(["a", "b"], 16, 1)
    assert P.identity(plan) == P.identity(same) and len(P.identity(plan)) == 64
    others = [P.make_plan(["a", "c"], 16, 1), P.make_plan(["b", "a"], 16, 1), P.make_plan(["a", "b"], 17, 1),
              P.make_plan(["a", "b"], 16, 2), P.make_plan(["a", [1, 2]], 16, 1)]
    assert len({P.identity(p) for p in others} | {P.identity(plan)}) == 6


@pytest.mark.parametrize(("prompts", "max_tokens", "warmup", "message"), [
    ([], 16, 1, "at least one prompt"),
    ([""], 16, 1, "prompt 1 is neither"),
    (["a", [1, "x"]], 16, 1, "prompt 2 is neither"),
    (["a", [True]], 16, 1, "prompt 2 is neither"),
    (["a", [-1]], 16, 1, "prompt 2 is neither"),
    (["a", 5], 16, 1, "prompt 2 is neither"),
    (["a"], 1, 1, "max_tokens must be at least 2"),
    (["a"], 4, -1, "warmup must not be negative"),
])
def test_a_plan_refuses_what_it_cannot_send(prompts, max_tokens, warmup, message):
    with pytest.raises(ValueError, match=message):
        P.make_plan(prompts, max_tokens, warmup)


def test_events_of_sglangs_stream():
    assert P.parse_event(b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n') == {
        "text": "a", "meta_info": {"completion_tokens": 1}}
    assert P.parse_event(b"data: [DONE]\r\n") is P.DONE
    assert P.parse_event(b"\n") is None and P.parse_event(": keep-alive\n") is None
    assert P.parse_event(b"event: x\n") is None
    with pytest.raises(P.ProbeError, match="the server failed the request: out of memory"):
        P.parse_event(b'data: {"error": {"message": "out of memory"}}\n')
    with pytest.raises(P.ProbeError, match="not JSON"):
        P.parse_event(b"data: {half\n")
    with pytest.raises(P.ProbeError, match="not a JSON object"):
        P.parse_event(b"data: [1, 2]\n")


def chunk(tokens, verify=None):
    meta = {"completion_tokens": tokens}
    if verify is not None:
        meta["spec_verify_ct"] = verify
    return {"text": "x" * tokens, "meta_info": meta}


def test_timing_counts_tokens_by_completion_tokens():
    """completion_tokens counts the tokens so far; a chunk with no new token is no arrival; the last
    spec_verify_ct read is the request's; a chunk without completion_tokens counts one more."""
    t = P.timing_of(10.0, [(10.2, chunk(1)), (10.3, chunk(4)), (10.35, chunk(4, verify=2)), (10.4, {"text": "y"})],
                    10.4)
    assert t.chunks == ((10.2, 1), (10.3, 4), (10.4, 5))
    assert t.completion_tokens == 5 and t.verify_ct == 2 and t.sent == 10.0 and t.done == 10.4
    assert P.timing_of(1.0, [], 1.0).chunks == ()
    bad = P.timing_of(1.0, [(1.1, {"meta_info": {"completion_tokens": "7", "spec_verify_ct": -1}})], 1.1)
    assert bad.completion_tokens == 1 and bad.verify_ct is None


def test_stream_one_times_each_chunk_as_it_arrives():
    with sglang_stream(first=0.15, gap=0.2, steps=(1, 3, 3, 1)) as base:
        t = P.stream_one(base + "/generate", {"text": "x"}, "", 5)
    assert [c[1] for c in t.chunks] == [1, 4, 7, 8] and t.completion_tokens == 8 and t.verify_ct == 3
    # No chunk is stamped before the server sent it (chunk k leaves 0.15 + 0.2 k s after the request),
    # and the first is stamped when it came, not with the last, 0.6 s later; a loaded machine may read
    # two chunks at once, so no gap between neighbours is asserted.
    offsets = [c[0] - t.sent for c in t.chunks]
    assert all(off >= 0.15 + 0.2 * k for k, off in enumerate(offsets)), offsets
    assert offsets == sorted(offsets) and t.chunks[0][0] < t.done == t.chunks[-1][0]


def test_run_warms_up_then_times_each_prompt_with_the_key():
    seen = []
    plan = P.make_plan(["one", [5, 6]], max_tokens=4, warmup=2)
    with sglang_stream(first=0.01, gap=0.01, key="sk-1", seen=seen) as base:
        timings = P.run(base + "/", plan, key="sk-1", timeout=5)
    assert len(timings) == 2 and all(t.completion_tokens == 4 for t in timings)
    assert [(s[0], s[2]) for s in seen] == [("/generate", "Bearer sk-1")] * 4
    bodies = [s[1] for s in seen]
    assert [b.get("text", b.get("input_ids")) for b in bodies] == ["one", [5, 6], "one", [5, 6]]
    assert all(b["stream"] is True and b["sampling_params"]["temperature"] == 0 for b in bodies)


@pytest.mark.parametrize(("server", "key", "message"), [
    (dict(key="sk-1"), "", "answered 401: Unauthorized"),
    (dict(status=503), "", "answered 503: scheduler is not responding"),
    (dict(error="CUDA out of memory"), "", "the server failed the request: CUDA out of memory"),
    (dict(steps=()), "", "streamed no tokens"),
])
def test_what_stops_a_probe_is_named(server, key, message):
    with sglang_stream(**server) as base:
        with pytest.raises(P.ProbeError, match=message):
            P.run(base, P.make_plan(["x"], 4, 0), key=key, timeout=5)


def test_nothing_listening_and_a_server_too_slow():
    with sglang_stream() as base:
        pass
    with pytest.raises(P.ProbeError, match="POST http://127.0.0.1:.*/generate: "):
        P.run(base, P.make_plan(["x"], 4, 0), timeout=2)
    with sglang_stream(first=1.0) as slow:
        with pytest.raises(P.ProbeError, match="no complete answer within 0.2s"):
            P.run(slow, P.make_plan(["x"], 4, 0), timeout=0.2)
