"""perf/gate.py: the record (made, written, parsed), when two records compare, and the verdict,
one line per figure past its limit."""
from __future__ import annotations

import json

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.perf import gate as G

PROBE = {"endpoint": "/generate", "prompts": 4, "max_tokens": 64, "warmup": 1, "digest": "a" * 64}
BASE = {"ttft_ms": 120.0, "itl_ms": 8.0, "output_tokens_per_s": 120.5, "acceptance": 3.0, "requests": 4,
        "output_tokens": 256}
LIMITS = G.Thresholds(max_ttft_regression=0.2, max_itl_regression=0.2, max_throughput_regression=0.2,
                      min_acceptance_ratio=0.9)


def record(release="5c1e", gpus=("GPU-1",), probe=None, **figures):
    return G.make_record(release, list(gpus), probe or PROBE, dict(BASE, **figures), "2026-12-01T10:00:00Z")


def test_a_record_round_trips():
    r = record()
    text = G.record_text(r)
    assert text.endswith("}\n") and G.parse_record(text) == r
    assert r == {"format": 1, "release": "5c1e", "gpus": ["GPU-1"], "probe": PROBE, "figures": BASE,
                 "when": "2026-12-01T10:00:00Z"}


@pytest.mark.parametrize(("text", "message"), [
    ("{half", "not JSON"),
    ("[]", "not a JSON object"),
    ('{"format": 2}', "format 2, not 1"),
    ('{"format": 1}', "no release, no gpus list, no probe digest, no figures"),
    (json.dumps({"format": 1, "release": "r", "gpus": [], "probe": {"digest": 5}, "figures": {}}), "no probe digest"),
])
def test_a_broken_record_is_named(text, message):
    with pytest.raises(ValueError, match=message):
        G.parse_record(text)


def test_no_baseline_passes():
    v = G.verdict(record(), None, LIMITS)
    assert v.passed and v.status == "no_baseline" and v.failures == () and "no figures recorded" in v.reason


def test_another_probe_or_other_gpus_are_not_compared():
    slow = record(ttft_ms=900.0)
    other_probe = record(probe=dict(PROBE, digest="b" * 64))
    v = G.verdict(slow, other_probe, LIMITS)
    assert v.passed and v.status == "not_comparable" and v.checks == ()
    assert v.reason == "release 5c1e was measured with another probe (digest bbbbbbbbbbbb, this one aaaaaaaaaaaa)"
    v = G.verdict(slow, record(gpus=("GPU-2",)), LIMITS)
    assert v.status == "not_comparable" and v.reason == "release 5c1e was measured on other GPUs (GPU-2, these GPU-1)"
    v = G.verdict(record(gpus=()), record(gpus=("GPU-2", "GPU-1")), LIMITS)
    assert v.reason.endswith("(GPU-2, GPU-1, these none named)")


def test_within_the_limits_passes_with_a_line_per_figure():
    cand = record(release="77ab", ttft_ms=143.0, itl_ms=9.5, output_tokens_per_s=97.0, acceptance=2.71)
    v = G.verdict(cand, record(), LIMITS)
    assert v.status == "passed" and v.passed and v.failures == () and v.baseline_release == "5c1e"
    assert v.checks == (
        "time to first token 143 ms against 120 ms for release 5c1e (+19 %, limit +20 %)",
        "inter-token latency 9.50 ms against 8.00 ms for release 5c1e (+19 %, limit +20 %)",
        "output tokens per second 97.0 against 120 for release 5c1e (-20 %, limit -20 %)",
        "acceptance 2.71 against 3.00 tokens per verify step for release 5c1e (-10 %, limit -10 %)",
    )


def test_each_figure_past_its_limit_is_named():
    cand = record(release="77ab", ttft_ms=182.0, itl_ms=9.7, output_tokens_per_s=96.0, acceptance=2.69)
    v = G.verdict(cand, record(), LIMITS)
    assert v.status == "refused" and not v.passed and v.checks == v.failures
    assert v.failures[0] == "time to first token 182 ms against 120 ms for release 5c1e (+52 %, limit +20 %)"
    assert [line.split(" against")[0] for line in v.failures] == [
        "time to first token 182 ms", "inter-token latency 9.70 ms", "output tokens per second 96.0",
        "acceptance 2.69"]
    assert v.as_dict()["passed"] is False and v.as_dict()["failures"] == list(v.failures)


def test_faster_is_never_refused():
    cand = record(ttft_ms=60.0, itl_ms=4.0, output_tokens_per_s=300.0, acceptance=5.0)
    v = G.verdict(cand, record(), LIMITS)
    assert v.status == "passed" and v.checks[0].endswith("(-50 %, limit +20 %)")


def test_only_the_thresholds_set_are_checked():
    cand = record(ttft_ms=1000.0, itl_ms=80.0, output_tokens_per_s=1.0, acceptance=1.0)
    v = G.verdict(cand, record(), G.Thresholds(max_itl_regression=0.5))
    assert v.status == "refused" and len(v.checks) == 1 and v.failures[0].startswith("inter-token latency 80.0 ms")
    assert G.verdict(cand, record(), G.Thresholds()).status == "passed"


def test_lost_acceptance_and_missing_figures():
    """A candidate with no verify steps against a baseline with them fails; a baseline without a figure
    (no speculative decoding then, or a zero) leaves that figure uncompared."""
    v = G.verdict(record(acceptance=None), record(), LIMITS)
    assert v.failures == ("acceptance not measured against 3.00 tokens per verify step for release 5c1e",)
    v = G.verdict(record(acceptance=3.0), record(acceptance=None, itl_ms=0.0), LIMITS)
    assert v.status == "passed" and len(v.checks) == 2


@pytest.mark.parametrize(("value", "text"), [(182.4, "182"), (40.54, "40.5"), (8.123, "8.12"), (0.5, "0.50")])
def test_numbers_as_messages_show_them(value, text):
    assert G.number(value) == text
