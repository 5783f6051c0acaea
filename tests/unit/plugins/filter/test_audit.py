"""audit_columns / audit_table / audit_report: the facts the incident compared by hand, from pkg_probe results."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "dflash_audit_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "audit.py")
audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit)

SP = "/v/lib/python3.11/site-packages"


def probe(venv, torch, cuda, kernels, extra=None):
    dists = {"torch": {"version": torch, "top_level": ["torch"]}}
    for k, v in kernels.items():
        dists[k] = {"version": v, "top_level": ["sgl_kernel"]}
    dists.update(extra or {})
    return {"item": venv, "site_packages": SP, "python": {"version": "3.11.2"},
            "torch": {"version": torch, "cuda": cuda}, "distributions": dists, "unsatisfied": [],
            "gpus": [{"name": "GPU", "compute_capability": "12.0"}] * 2, "driver_version": "580.95.05"}


def hostvars(p, dflash_files=(), units=None):
    files = [{"path": f"{SP}/{f}"} for f in dflash_files]
    return {"__audit_probe": {"results": [p]},
            "__audit_dflash": {"results": [{"item": {"site_packages": SP}, "files": files}]},
            "__audit_units": {"ansible_facts": {"services": units or {}}}}


GOOD = hostvars(probe("/good", "2.11.0+cu130", "13.0", {"sglang-kernel": "0.4.2"}), audit.DFLASH_FILES,
                {"sglang-dflash@main.service": {"state": "running"}, "ssh.service": {"state": "running"}})
BAD = hostvars(probe("/bad", "2.11.0+cu128", "12.8", {"sglang-kernel": "0.4.2", "sgl-kernel": "0.3.21"}))


def test_columns_name_the_incidents_differences():
    cols = audit.audit_columns({"ct129": GOOD, "ct200": BAD}, ["ct129", "ct200"])
    good, bad = cols["ct129:/good"], cols["ct200:/bad"]
    assert good["torch build"] == "2.11.0+cu130 (CUDA 13.0)" and bad["torch build"] == "2.11.0+cu128 (CUDA 12.8)"
    assert good["owner of sgl_kernel"] == "sglang-kernel"
    assert bad["owner of sgl_kernel"] == "sgl-kernel + sglang-kernel"
    assert good["DFlash files"].startswith("dflash_worker.py") and bad["DFlash files"] == "(none)"
    assert good["units"] == "sglang-dflash@main.service running" and bad["units"] == "(none)"
    assert bad["dist sgl-kernel"] == "0.3.21" and "dist sgl-kernel" not in good


def test_table_keeps_only_rows_that_differ_unless_asked():
    cols = audit.audit_columns({"ct129": GOOD, "ct200": BAD}, ["ct129", "ct200"])
    rows = dict(audit.audit_rows(cols))
    assert "python" not in rows and "GPUs" not in rows          # the same on both
    assert rows["dist sgl-kernel"] == ["-", "0.3.21"]
    assert "python" in dict(audit.audit_rows(cols, show_all=True))
    lines = audit.audit_table(cols)
    assert lines[0].split() == ["fact", "ct129:/good", "ct200:/bad"]
    assert any(line.startswith("torch build") for line in lines)


def test_identical_hosts_say_so_and_a_failed_probe_is_a_column():
    cols = audit.audit_columns({"a": GOOD, "b": GOOD}, ["a", "b"])
    assert audit.audit_table(cols) == ["audit: 2 venvs, no difference in any fact"]
    broken = {"__audit_probe": {"results": [{"item": "/x", "failed": True, "msg": "no interpreter"}]}}
    cols = audit.audit_columns({"a": GOOD, "b": broken}, ["a", "b"])
    assert cols["b:/x"] == {"error": "no interpreter"}
    assert dict(audit.audit_rows(cols))["error"] == ["-", "no interpreter"]


def test_the_same_version_from_other_bytes_is_a_difference():
    clean = {"triton": {"version": "3.6.0", "top_level": ["triton"], "record_sha256": "a" * 64}}
    planted = {"triton": {"version": "3.6.0", "top_level": ["triton"], "record_sha256": "b" * 64}}
    one = hostvars(probe("/r", "2.11.0+cu130", "13.0", {"sglang-kernel": "0.4.2"}, clean))
    two = hostvars(probe("/r", "2.11.0+cu130", "13.0", {"sglang-kernel": "0.4.2"}, planted))
    rows = dict(audit.audit_rows(audit.audit_columns({"ct129": one, "ct200": two}, ["ct129", "ct200"])))
    assert rows == {"sha256 triton": ["a" * 16, "b" * 16]}  # the versions agree; only the bytes differ
    same = dict(audit.audit_rows(audit.audit_columns({"ct129": one, "ct200": one}, ["ct129", "ct200"])))
    assert same == {}


def test_the_published_report_holds_every_column_and_the_facts_that_differ():
    cols = audit.audit_columns({"ct129": GOOD, "ct200": BAD}, ["ct129", "ct200"])
    report = audit.audit_report(cols)
    assert report["columns"] == cols                                  # every fact, also those alike
    assert report["differ"] == [row for row, _values in audit.audit_rows(cols)]
    assert "torch build" in report["differ"] and "python" not in report["differ"]
    one = audit.audit_columns({"ct129": GOOD}, ["ct129"])
    assert audit.audit_report(one) == {"columns": one, "differ": []}  # one column: nothing to differ from
    assert audit.audit_report({}) == {"columns": {}, "differ": []}


def test_each_instance_column_shows_the_figures_recorded_for_its_current_release():
    import base64
    import json
    record = {"format": 1, "release": "5c1e", "gpus": ["GPU-b"], "probe": {"digest": "9f2c"},
              "figures": {"ttft_ms": 41.23, "itl_ms": 7.95, "output_tokens_per_s": 118.3, "acceptance": 3.123},
              "when": "2026-12-02T15:00:00Z"}
    link_a, link_b = "/opt/dflash/instances/a/current", "/opt/dflash/instances/b/current"
    hv = hostvars(probe(link_a, "2.11.0+cu130", "13.0", {"sglang-kernel": "0.4.2"}))
    hv["__audit_probe"]["results"].append(probe(link_b, "2.11.0+cu130", "13.0", {"sglang-kernel": "0.4.2"}))
    hv["__audit_perf"] = {"results": [
        {"item": {"name": "a", "current": {"path": link_a}},
         "content": base64.b64encode(json.dumps(record).encode()).decode()},
        {"item": {"name": "b", "current": {"path": link_b}}, "failed": True, "msg": "file not found"}]}
    cols = audit.audit_columns({"ct200": hv}, ["ct200"])
    assert cols[f"ct200:{link_a}"]["performance record"] == \
        "TTFT 41.2 ms, ITL 7.95 ms, 118 tok/s, acceptance 3.12 (2026-12-02T15:00:00Z)"
    assert cols[f"ct200:{link_b}"]["performance record"] == "(none recorded)"
    # the reference venv (no instance) has no such row; a record that is not one says so
    assert "performance record" not in audit.audit_columns({"ct129": GOOD}, ["ct129"])["ct129:/good"]
    hv["__audit_perf"]["results"][0]["content"] = base64.b64encode(b"{not json").decode()
    assert audit.audit_columns({"ct200": hv}, ["ct200"])[f"ct200:{link_a}"]["performance record"] == \
        "(unreadable record)"
