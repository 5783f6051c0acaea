# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The performance gate: the record of a release's figures, and the verdict on a candidate
against the record of the release it replaces.

A record (JSON) names the release, the GPUs it ran on, the probe (its identity digest and shape),
the figures and when they were measured. Two records compare only when the probe identity and the
GPUs are the same; otherwise the candidate passes, not compared, and the reason says why. No
baseline (the first release) passes too. Each threshold the operator sets is checked; one line per
figure past its limit, e.g. "time to first token 182 ms against 120 ms for release 5c1e (+52 %,
limit +20 %)".

Pure functions; standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

RECORD_FORMAT = 1
MAX_RECORD_BYTES = 1 << 20

PASSED, REFUSED, NO_BASELINE, NOT_COMPARABLE = "passed", "refused", "no_baseline", "not_comparable"


@dataclass(frozen=True)
class Thresholds:
    """Each limit as a fraction; None leaves that figure unchecked. ``max_*_regression``: how much
    slower (latency up, throughput down) than the baseline is still accepted, 0.2 = 20 %;
    ``min_acceptance_ratio``: the least share of the baseline's acceptance accepted, 0.9 = 90 %."""

    max_ttft_regression: float | None = None
    max_itl_regression: float | None = None
    max_throughput_regression: float | None = None
    min_acceptance_ratio: float | None = None


@dataclass(frozen=True)
class Verdict:
    status: str  # passed, refused, no_baseline, not_comparable
    failures: tuple = ()  # one line per figure past its limit
    checks: tuple = ()  # one line per figure compared (the failures among them)
    baseline_release: str | None = None
    reason: str | None = None  # why nothing was compared

    @property
    def passed(self):
        return self.status != REFUSED

    def as_dict(self):
        return {"status": self.status, "passed": self.passed, "failures": list(self.failures),
                "checks": list(self.checks), "baseline_release": self.baseline_release, "reason": self.reason}


# -- the record ----------------------------------------------------------------------------------

def make_record(release, gpus, probe, figures, when):
    """A record: ``probe`` is ``ProbePlan.as_dict()``, ``figures`` ``Figures.as_dict()``, ``when`` an
    ISO 8601 UTC time."""
    return {"format": RECORD_FORMAT, "release": release, "gpus": list(gpus or []), "probe": dict(probe),
            "figures": dict(figures), "when": when}


def record_text(record):
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def parse_record(text):
    """The record in ``text``; raises ValueError naming what is wrong with it."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise ValueError("not JSON (%s)" % exc) from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if record.get("format") != RECORD_FORMAT:
        raise ValueError("format %r, not %d" % (record.get("format"), RECORD_FORMAT))
    problems = []
    if not isinstance(record.get("release"), str) or not record.get("release"):
        problems.append("no release")
    if not isinstance(record.get("gpus"), list):
        problems.append("no gpus list")
    probe = record.get("probe")
    if not isinstance(probe, dict) or not isinstance(probe.get("digest"), str):
        problems.append("no probe digest")
    if not isinstance(record.get("figures"), dict):
        problems.append("no figures")
    if problems:
        raise ValueError(", ".join(problems))
    return record


# -- the verdict ---------------------------------------------------------------------------------

# (key, name in a message, unit after the candidate's value, unit after the baseline's, lower is better,
# threshold field)
_CHECKS = (
    ("ttft_ms", "time to first token", " ms", " ms", True, "max_ttft_regression"),
    ("itl_ms", "inter-token latency", " ms", " ms", True, "max_itl_regression"),
    ("output_tokens_per_s", "output tokens per second", "", "", False, "max_throughput_regression"),
    ("acceptance", "acceptance", "", " tokens per verify step", False, "min_acceptance_ratio"),
)


def number(value):
    """A figure as a message shows it: 182, 40.5, 8.12."""
    value = float(value)
    if abs(value) >= 100:
        return "%.0f" % value
    if abs(value) >= 10:
        return "%.1f" % value
    return "%.2f" % value


def percent(fraction):
    """+52 %, -33 %, +0 %: a change as a signed whole percentage."""
    return "%+d %%" % int(round(fraction * 100))


def _limit(field, threshold, lower_better):
    """The limit as a signed change from the baseline: +20 % (latency), -20 % (throughput), -10 % (a
    0.9 acceptance ratio)."""
    if field == "min_acceptance_ratio":
        change = threshold - 1.0
    else:
        change = threshold if lower_better else -threshold
    return "%+g %%" % round(change * 100, 6)


def _show(key, value):
    return "%.2f" % value if key == "acceptance" else number(value)


def _present(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_figure(key, name, units, lower_better, field, threshold, new, old, release):
    """(line, failed) for one figure, or None when it is not compared (no threshold, or no usable
    baseline figure)."""
    if threshold is None or not _present(old) or old <= 0:
        return None
    old_text = _show(key, old)
    if not _present(new):
        return ("%s not measured against %s%s for release %s" % (name, old_text, units[1], release), True)
    new_text = _show(key, new)
    change = new / float(old) - 1.0
    if field == "min_acceptance_ratio":
        failed = new < old * threshold
    elif lower_better:
        failed = change > threshold
    else:
        failed = -change > threshold
    line = "%s %s%s against %s%s for release %s (%s, limit %s)" % (
        name, new_text, units[0], old_text, units[1], release, percent(change), _limit(field, threshold, lower_better))
    return line, failed


def comparable(candidate, baseline):
    """None when the two records may be compared, else why not."""
    release = baseline.get("release")
    old_probe, new_probe = baseline.get("probe", {}).get("digest"), candidate.get("probe", {}).get("digest")
    if old_probe != new_probe:
        return "release %s was measured with another probe (digest %s, this one %s)" % (
            release, str(old_probe)[:12], str(new_probe)[:12])
    if list(baseline.get("gpus") or []) != list(candidate.get("gpus") or []):
        return "release %s was measured on other GPUs (%s, these %s)" % (
            release, ", ".join(baseline.get("gpus") or []) or "none named",
            ", ".join(candidate.get("gpus") or []) or "none named")
    return None


def verdict(candidate, baseline, thresholds):
    """The ``Verdict`` on the ``candidate`` record against the ``baseline`` record (None: there is
    none) under ``thresholds``."""
    if baseline is None:
        return Verdict(status=NO_BASELINE, reason="no figures recorded for a release before this one")
    release = baseline.get("release")
    why = comparable(candidate, baseline)
    if why:
        return Verdict(status=NOT_COMPARABLE, baseline_release=release, reason=why)
    new, old = candidate.get("figures", {}), baseline.get("figures", {})
    checks, failures = [], []
    for key, name, new_unit, old_unit, lower_better, field in _CHECKS:
        result = check_figure(key, name, (new_unit, old_unit), lower_better, field, getattr(thresholds, field),
                              new.get(key), old.get(key), release)
        if result is None:
            continue
        line, failed = result
        checks.append(line)
        if failed:
            failures.append(line)
    return Verdict(status=REFUSED if failures else PASSED, failures=tuple(failures), checks=tuple(checks),
                   baseline_release=release)
