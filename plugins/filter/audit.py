# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind playbooks/audit.yml: what each host/venv holds, and where they differ.

``audit_columns`` turns what the audit play registered on each host (pkg_probe per venv,
the DFlash files found, the units) into one flat column of facts per host and venv, with
each distribution's version (``dist <name>``) and the sha256 of what it installed
(``sha256 <name>``: pkg_probe's ``record_sha256``, over its RECORD's paths and hashes);
each instance's ``current`` column also has the ``performance record`` row: the figures the
performance gate recorded for that release on that instance (``__audit_perf``, the record read
with slurp), or ``(none recorded)``;
``audit_table`` lays the columns side by side and keeps the rows where they differ;
``audit_report`` is what the play publishes with set_stats (the columns and the facts that differ).
All are pure functions of their input.
"""
from __future__ import annotations

import base64
import json

from ansible_collections.dflash.deploy.plugins.module_utils.perf.gate import number

DFLASH_FILES = (
    "sglang/srt/speculative/dflash_worker.py",
    "sglang/srt/speculative/dflash_info.py",
    "sglang/srt/speculative/dflash_utils.py",
    "sglang/srt/models/dflash.py",
)
KERNEL_IMPORT = "sgl_kernel"
UNIT_PREFIX = "sglang-dflash@"


def _gpus(probe: dict) -> str:
    gpus = probe.get("gpus") or []
    if not gpus:
        return probe.get("gpus_reason") or "none listed"
    names: dict[str, int] = {}
    for g in gpus:
        key = f"{g.get('name')} ({g.get('compute_capability')})"
        names[key] = names.get(key, 0) + 1
    text = ", ".join(f"{n}x {k}" for k, n in names.items())
    errors = probe.get("gpu_errors") or []
    return text + (f"; {len(errors)} unreachable" if errors else "")


def _kernel_owner(dists: dict) -> str:
    owners = sorted(name for name, d in dists.items() if KERNEL_IMPORT in (d.get("top_level") or []))
    return " + ".join(owners) if owners else "(none)"


def _torch(probe: dict) -> str:
    torch = probe.get("torch") or {}
    if not torch.get("version"):
        return "(none)"
    return f"{torch['version']} (CUDA {torch.get('cuda') or 'none'})"


def venv_column(probe: dict, dflash_found: list, units: dict) -> dict:
    """Facts of one venv on one host, as strings, keyed by row name."""
    dists = probe.get("distributions") or {}
    col = {
        "python": (probe.get("python") or {}).get("version") or "(none)",
        "torch build": _torch(probe),
        f"owner of {KERNEL_IMPORT}": _kernel_owner(dists),
        "DFlash files": ", ".join(f.rsplit("/", 1)[1] for f in DFLASH_FILES if f in dflash_found) or "(none)",
        "unsatisfied requirements": ", ".join(sorted(
            f"{u.get('distribution')}: {u.get('requirement')}" for u in probe.get("unsatisfied") or [])) or "(none)",
        "GPUs": _gpus(probe),
        "driver": f"{probe.get('driver_version') or '?'}",
        "units": ", ".join(f"{name} {state}" for name, state in sorted(units.items())) or "(none)",
    }
    for name, d in dists.items():
        col[f"dist {name}"] = d.get("version") or "?"
        if d.get("record_sha256"):
            # the files as installed: the same version from other bytes (a planted .pth) differs here
            col[f"sha256 {name}"] = d["record_sha256"][:16]
    return col


PERF_ROW = "performance record"


def perf_record_text(record) -> str:
    """A performance record (perf_probe's ``record``, as the gate keeps it per release and instance)
    in one line: its figures and when they were measured."""
    if not isinstance(record, dict) or not isinstance(record.get("figures"), dict):
        return "(unreadable record)"
    figs, parts = record["figures"], []
    for key, label, unit in (("ttft_ms", "TTFT ", " ms"), ("itl_ms", "ITL ", " ms"),
                             ("output_tokens_per_s", "", " tok/s"), ("acceptance", "acceptance ", "")):
        value = figs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{label}{number(value)}{unit}")
    return (", ".join(parts) or "no figures") + (f" ({record['when']})" if record.get("when") else "")


def _perf_rows(hv: dict) -> dict:
    """{current link path: the performance record row} from the host's __audit_perf (slurp per instance)."""
    rows = {}
    for r in (hv.get("__audit_perf") or {}).get("results") or []:
        link = ((r.get("item") or {}).get("current") or {}).get("path")
        if not link or r.get("skipped"):
            continue
        if not r.get("content"):
            rows[link] = "(none recorded)"
            continue
        try:
            rows[link] = perf_record_text(json.loads(base64.b64decode(r["content"]).decode("utf-8")))
        except (ValueError, TypeError):
            rows[link] = "(unreadable record)"
    return rows


def _relative_dflash(files: list, site_packages: str) -> list:
    prefix = site_packages.rstrip("/") + "/"
    return [f["path"][len(prefix):] for f in files if f.get("path", "").startswith(prefix)]


def audit_columns(hostvars: dict, hosts: list) -> dict:
    """{"host:venv": {row: value}} from each host's __audit_probe, __audit_dflash and __audit_units."""
    columns = {}
    for host in hosts:
        hv = hostvars.get(host) or {}
        probes = (hv.get("__audit_probe") or {}).get("results") or []
        dflash = {(r.get("item") or {}).get("site_packages"): r.get("files") or []
                  for r in (hv.get("__audit_dflash") or {}).get("results") or []}
        services = ((hv.get("__audit_units") or {}).get("ansible_facts") or {}).get("services") or {}
        units = {name: s.get("state", "?") for name, s in services.items() if name.startswith(UNIT_PREFIX)}
        perf = _perf_rows(hv)
        for r in probes:
            if r.get("failed") or r.get("skipped"):
                columns[f"{host}:{r.get('item')}"] = {"error": r.get("msg") or "probe skipped"}
                continue
            found = _relative_dflash(dflash.get(r.get("site_packages")) or [], r.get("site_packages") or "")
            columns[f"{host}:{r.get('item')}"] = venv_column(r, found, units)
            if r.get("item") in perf:
                columns[f"{host}:{r.get('item')}"][PERF_ROW] = perf[r.get("item")]
    return columns


def audit_rows(columns: dict, show_all: bool = False) -> list:
    """[(row, [value per column])], rows where the columns differ first in a fixed order."""
    order = ["python", "torch build", f"owner of {KERNEL_IMPORT}", "DFlash files", "unsatisfied requirements",
             "GPUs", "driver", "units", PERF_ROW, "error"]
    names = set()
    for col in columns.values():
        names.update(col)
    rows = [n for n in order if n in names] + sorted(n for n in names if n not in order)
    out = []
    for row in rows:
        values = [columns[c].get(row, "-") for c in columns]
        if show_all or len(columns) < 2 or len(set(values)) > 1:
            out.append((row, values))
    return out


def audit_table(columns: dict, show_all: bool = False, width: int = 48) -> list:
    """Lines of a text table: one row per fact that differs, one column per host:venv."""
    if not columns:
        return ["audit: no venv was probed (set audit_venvs, or deploy an instance first)"]
    rows = audit_rows(columns, show_all)
    if not rows:
        return [f"audit: {len(columns)} venvs, no difference in any fact"]

    def cut(text: str) -> str:
        text = str(text)
        return text if len(text) <= width else text[:width - 1] + "…"
    heads = ["fact"] + list(columns)
    body = [[row] + [cut(v) for v in values] for row, values in rows]
    widths = [max(len(r[i]) for r in [heads] + body) for i in range(len(heads))]

    def line(cells: list) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
    return [line(heads), line(["-" * w for w in widths])] + [line(r) for r in body]


def audit_report(columns: dict) -> dict:
    """What the audit publishes (set_stats dflash_audit): every column's facts, and the facts
    that differ between the columns (none with fewer than two columns)."""
    return {"columns": columns,
            "differ": [row for row, values in audit_rows(columns) if len(set(map(str, values))) > 1]}


class FilterModule:
    def filters(self):
        return {"audit_columns": audit_columns, "audit_table": audit_table, "audit_report": audit_report}
