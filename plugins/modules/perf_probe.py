#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: perf_probe
short_description: Measure an SGLang instance with a fixed probe and compare it with the release it replaces
version_added: "0.1.0"
description:
  - Sends a fixed probe to one SGLang instance's C(/generate), streamed, one request at a time, first
    O(warmup) requests whose answers are dropped (the first request after a start pays for kernel compiles),
    then each of O(prompts) once, greedy (C(temperature 0)), exactly O(max_tokens) tokens (C(ignore_eos)).
    Each chunk is timed on the host's monotonic clock as it arrives.
  - "Returns the figures: time to first token (median over the requests), inter-token latency (median over
    every token after the first; a chunk that brings several tokens, as speculative decoding does, shares its
    gap among them), output tokens per second (all tokens over the summed request times) and, when the server
    reports verify steps (C(meta_info.spec_verify_ct), with a speculative algorithm such as DFLASH), the
    acceptance: tokens per verify step."
  - With O(baseline), the record of the release being replaced, compares the figures with it when both were
    measured with the same probe (its identity digest covers every request body and the warm-up count) on the
    same O(gpus); each figure past the limit the operator set fails the task, the message naming every such
    figure, its value, the baseline's and the limit. No baseline file (the first release), or one measured with
    another probe or on other GPUs, passes without a comparison and the C(reason) of RV(verdict) says why. A baseline
    file that cannot be read or parsed fails the task.
  - With O(record), writes the figures as the record of O(release) when the gate passes, atomically (a
    temporary file in the same directory, then a rename).
author:
  - dflash.deploy contributors (@dflash)
options:
  port:
    description:
      - The instance's port.
    type: int
    required: true
  host:
    description:
      - The address the instance listens on, as seen from the host the module runs on.
    type: str
    default: 127.0.0.1
  unit:
    description:
      - The instance's systemd unit. Before each request the processes listening on O(port) (at an address that
        covers O(host)) must be in its control group (or run as O(user)); a port held by anyone else fails the
        probe, naming the process, its user and command, and neither the request nor the key is sent to it.
        O(unit) or O(user) is required.
    type: str
  user:
    description:
      - A user whose processes may hold the port (a server not run by systemd, the module run alone).
    type: str
  env_file:
    description:
      - The instance's env file, from which the API key (C(SGLANG_API_KEY)) is read, parsed as systemd parses an
        C(EnvironmentFile=), as M(dflash.deploy.instance_ready) reads it. Mutually exclusive with O(api_key).
    type: path
  api_key:
    description:
      - The instance's API key, sent as C(Authorization Bearer). Prefer O(env_file), which keeps the key out of
        the task's arguments. Never returned or logged.
    type: str
  prompts:
    description:
      - The probe's prompts, each a text or a list of token ids (sent as C(input_ids)). Without it, four fixed
        texts. Changing them changes the probe's identity, so the next release is not compared with the last.
    type: list
    elements: raw
  max_tokens:
    description:
      - Tokens generated for each prompt (C(max_new_tokens), with C(ignore_eos)). At least 2.
    type: int
    default: 64
  warmup:
    description:
      - Requests sent before the timed ones, their answers dropped (the prompts in turn).
    type: int
    default: 1
  timeout:
    description:
      - Seconds one request may take in all (the connection, the answer and its whole stream); a server that
        drips its stream fails the probe then. Each request reads at most 256 MiB.
    type: float
    default: 120
  release:
    description:
      - The release the instance runs, as the record names it and the messages quote it. Required with
        O(record).
    type: str
  gpus:
    description:
      - The GPUs the instance runs on (for example their UUIDs), in the instance's order. Figures measured on
        other GPUs are not compared.
    type: list
    elements: str
    default: []
  baseline:
    description:
      - The record of the release being replaced (written by an earlier run's O(record)). A missing file means
        there is none.
    type: path
  record:
    description:
      - Where to write this release's record when the gate passes. Its directory must exist.
    type: path
  max_ttft_regression:
    description:
      - How much longer the time to first token may be than the baseline's, as a fraction (0.2 = 20 %).
    type: float
    default: 0.2
  max_itl_regression:
    description:
      - How much longer the inter-token latency may be than the baseline's, as a fraction.
    type: float
    default: 0.2
  max_throughput_regression:
    description:
      - How much lower the output tokens per second may be than the baseline's, as a fraction.
    type: float
    default: 0.2
  min_acceptance_ratio:
    description:
      - The least acceptance (tokens per verify step) accepted, as a fraction of the baseline's (0.9 = 90 %).
        A candidate that reports no verify steps against a baseline that did fails.
    type: float
    default: 0.9
notes:
  - Check mode measures nothing and writes nothing; it reads the baseline and says what a run would do.
  - Requests go straight to the instance, never through a proxy named by the environment, and carry no
    credentials from C(~/.netrc).
  - The probe competes with live traffic; run it before the instance takes any (after readiness, before
    promotion), or the figures measure the traffic too.
seealso:
  - module: dflash.deploy.instance_ready
"""

EXAMPLES = r"""
- name: Measure the new release and compare it with the one it replaces
  dflash.deploy.perf_probe:
    port: 30001
    env_file: /etc/dflash/qwen3-8b.env
    release: "{{ release_id }}"
    gpus: "{{ instance_gpu_uuids }}"
    baseline: /opt/dflash/instances/qwen3-8b/perf.json
    record: /opt/dflash/instances/qwen3-8b/perf-{{ release_id }}.json
    max_ttft_regression: 0.2
    min_acceptance_ratio: 0.9
  register: perf

- name: Show the figures
  ansible.builtin.debug:
    msg: "{{ perf.figures }} ({{ perf.verdict.status }})"
"""

RETURN = r"""
probe:
  description: The probe, its identity digest and shape.
  returned: always
  type: dict
  sample: {"endpoint": "/generate", "prompts": 4, "max_tokens": 64, "warmup": 1, "digest": "9f2c41..."}
figures:
  description:
    - The figures; null in check mode. C(acceptance) is null when the server reported no verify steps.
  returned: always
  type: dict
  sample: {"ttft_ms": 41.2, "itl_ms": 7.95, "output_tokens_per_s": 118.3, "acceptance": 3.12, "requests": 4,
           "output_tokens": 256}
requests:
  description: Each timed request, in order; empty in check mode.
  returned: always
  type: list
  elements: dict
  sample: [{"ttft_ms": 40.8, "seconds": 0.541, "tokens": 64, "chunks": 22, "verify_ct": 21}]
verdict:
  description:
    - C(status) is C(passed), C(refused), C(no_baseline) (no baseline file) or C(not_comparable) (another
      probe or other GPUs; C(reason) says which); C(passed) is false only when refused. C(checks) has one line
      per figure compared, C(failures) those past their limit. Null in check mode.
  returned: always
  type: dict
  sample: {"status": "refused", "passed": false, "baseline_release": "5c1e9a0b7d3f2e41", "reason": null,
           "failures": ["time to first token 182 ms against 120 ms for release 5c1e9a0b7d3f2e41 (+52 %, limit +20 %)"],
           "checks": ["time to first token 182 ms against 120 ms for release 5c1e9a0b7d3f2e41 (+52 %, limit +20 %)"]}
baseline_release:
  description: The release the baseline record names; null without one.
  returned: always
  type: str
  sample: 5c1e9a0b7d3f2e41
recorded:
  description: True when O(record) was written.
  returned: always
  type: bool
msg:
  description: What was done, or in check mode what a run would do.
  returned: always
  type: str
  sample: "4 requests of 64 tokens: time to first token 41.2 ms, inter-token latency 7.95 ms, 118 tokens/s"
"""

import datetime
import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
    from ansible_collections.dflash.deploy.plugins.module_utils.host import listener as L
    from ansible_collections.dflash.deploy.plugins.module_utils.host.readiness import api_key as env_file_key
    from ansible_collections.dflash.deploy.plugins.module_utils.perf import figures as F
    from ansible_collections.dflash.deploy.plugins.module_utils.perf import gate as G
    from ansible_collections.dflash.deploy.plugins.module_utils.perf import probe as P
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def read_baseline(path):
    """(record or None, why it cannot be used or None): a missing file is no baseline."""
    if not path:
        return None, None
    try:
        data = read_regular(path, G.MAX_RECORD_BYTES)
    except OSError as exc:
        if not os.path.lexists(path):
            return None, None
        return None, "cannot be read (%s)" % (exc.strerror or exc)
    try:
        return G.parse_record(data.decode("utf-8", "replace")), None
    except ValueError as exc:
        return None, "is not a record of figures: %s" % exc


def write_record(module, path, text):
    """Write ``text`` to ``path`` through a temporary file in its directory and a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".perf-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_text(path):
    try:
        return read_regular(path, G.MAX_RECORD_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def request_summary(timing):
    return {"ttft_ms": round((timing.chunks[0][0] - timing.sent) * 1000.0, 3),
            "seconds": round(timing.done - timing.sent, 3), "tokens": timing.completion_tokens,
            "chunks": len(timing.chunks), "verify_ct": timing.verify_ct}


def summary(figs):
    parts = ["%d requests of %d tokens" % (figs.requests, figs.output_tokens // max(figs.requests, 1))]
    if figs.ttft_ms is not None:
        parts.append("time to first token %s ms" % G.number(figs.ttft_ms))
    if figs.itl_ms is not None:
        parts.append("inter-token latency %s ms" % G.number(figs.itl_ms))
    if figs.output_tokens_per_s is not None:
        parts.append("%s tokens/s" % G.number(figs.output_tokens_per_s))
    if figs.acceptance is not None:
        parts.append("acceptance %.2f tokens per verify step" % figs.acceptance)
    return parts[0] + ": " + ", ".join(parts[1:])


def owned_send(base, unit, user):
    """P.stream_one, sent only when the instance holds the port (listener.require before each request).
    Raises ValueError for a host name (no single address to check)."""
    host, port = L.target_of(base)
    control_group = L.unit_control_group(unit)

    def send(url, body, key, timeout):
        if not L.require(host, port, unit, user, key, control_group=control_group):
            raise P.ProbeError("nothing listens on %s:%d" % (host, port))
        return P.stream_one(url, body, key, timeout)
    return send


def main():
    module = AnsibleModule(
        argument_spec=dict(
            port=dict(type="int", required=True),
            host=dict(type="str", default="127.0.0.1"),
            unit=dict(type="str"),
            user=dict(type="str"),
            env_file=dict(type="path"),
            api_key=dict(type="str", no_log=True),
            prompts=dict(type="list", elements="raw"),
            max_tokens=dict(type="int", default=64, no_log=False),
            warmup=dict(type="int", default=1),
            timeout=dict(type="float", default=120),
            release=dict(type="str"),
            gpus=dict(type="list", elements="str", default=[]),
            baseline=dict(type="path"),
            record=dict(type="path"),
            max_ttft_regression=dict(type="float", default=0.2),
            max_itl_regression=dict(type="float", default=0.2),
            max_throughput_regression=dict(type="float", default=0.2),
            min_acceptance_ratio=dict(type="float", default=0.9),
        ),
        mutually_exclusive=[("env_file", "api_key")],
        required_one_of=[("unit", "user")],
        required_by={"record": "release"},
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    try:
        plan = P.make_plan(p["prompts"], p["max_tokens"], p["warmup"])
    except ValueError as exc:
        module.fail_json(msg="perf_probe: %s" % exc)
    host = p["host"]
    base = "http://%s:%d" % ("[%s]" % host if ":" in host else host, p["port"])
    result = dict(changed=False, probe=plan.as_dict(), figures=None, requests=[], verdict=None,
                  baseline_release=None, recorded=False)
    baseline, unusable = read_baseline(p["baseline"])
    if unusable:
        module.fail_json(msg="the baseline %s %s; remove it to promote without a comparison"
                         % (p["baseline"], unusable), **result)
    result["baseline_release"] = baseline.get("release") if baseline else None
    if module.check_mode:
        what = "would send %d warm-up and %d timed requests of %d tokens to %s%s" % (
            plan.warmup, len(plan.prompts), plan.max_tokens, base, P.ENDPOINT)
        if p["baseline"]:
            what += ", compare with " + ("release %s" % baseline["release"] if baseline
                                         else "no baseline (none recorded)")
        if p["record"]:
            what += ", and record the figures in %s when they pass" % p["record"]
        result["changed"] = bool(p["record"])
        module.exit_json(msg=what, **result)
    key = p["api_key"] or env_file_key(p["env_file"])
    try:
        send = owned_send(base, p["unit"], p["user"])
    except ValueError as exc:
        module.fail_json(msg="perf_probe: %s" % exc, **result)
    try:
        timings = P.run(base, plan, key=key, timeout=p["timeout"], send=send)
    except L.ForeignListener as exc:
        module.fail_json(msg="the performance probe did not measure %s: %s" % (base, exc), **result)
    except P.ProbeError as exc:
        module.fail_json(msg="the performance probe could not measure %s: %s" % (base, exc), **result)
    figs = F.figures(timings)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    candidate = G.make_record(p["release"], p["gpus"], plan.as_dict(), figs.as_dict(), when)
    thresholds = G.Thresholds(max_ttft_regression=p["max_ttft_regression"], max_itl_regression=p["max_itl_regression"],
                              max_throughput_regression=p["max_throughput_regression"],
                              min_acceptance_ratio=p["min_acceptance_ratio"])
    answer = G.verdict(candidate, baseline, thresholds)
    result.update(figures=figs.as_dict(), requests=[request_summary(t) for t in timings], verdict=answer.as_dict())
    msg = summary(figs)
    if answer.status == G.PASSED:
        msg += "; within the limits against release %s" % answer.baseline_release
    elif answer.reason:
        msg += "; not compared: %s" % answer.reason
    if not answer.passed:
        module.fail_json(msg="the performance gate refused release %s against release %s: %s" % (
            p["release"] or "(unnamed)", answer.baseline_release, "; ".join(answer.failures)), **result)
    if p["record"]:
        before = read_text(p["record"])
        after = G.record_text(candidate)
        if not os.path.isdir(os.path.dirname(os.path.abspath(p["record"]))):
            module.fail_json(msg="cannot record the figures: the directory of %s does not exist" % p["record"],
                             **result)
        try:
            write_record(module, p["record"], after)
        except OSError as exc:
            module.fail_json(msg="cannot record the figures in %s: %s" % (p["record"], exc.strerror or exc), **result)
        result.update(recorded=True, changed=before != after)
        if module._diff:
            result["diff"] = dict(before=before, after=after, before_header=p["record"], after_header=p["record"])
        msg += "; recorded in %s" % p["record"]
    module.exit_json(msg=msg, **result)


if __name__ == "__main__":
    main()
