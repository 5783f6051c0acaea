# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Finding kinds, their severity, and the one-line root-cause message.

A finding is a dict with ``kind``, ``path``, ``detail`` (one line),
``severity`` (error, warning, info) and, for files, ``load`` (import, lazy,
unused): a problem in a library loaded at import is an error, in one loaded
lazily per feature a warning unless that feature is configured.
"""

from __future__ import annotations

ERROR = "error"
WARNING = "warning"
INFO = "info"

# Root-cause order: the first error of the earliest kind in this list names the failure.
KINDS = (
    "venv_invalid",            # venv missing or not a venv
    "package_not_found",       # nothing installed under that import or distribution name
    "wrong_architecture",      # ELF class, byte order or machine not this host's: the loader refuses it
    "torch_missing",           # an extension needs libtorch but the venv has no torch
    "cuda_major_mismatch",     # extension built for CUDA N, torch for CUDA M
    "driver_missing",          # libcuda.so.1 (the NVIDIA driver) not found
    "library_not_found",       # a DT_NEEDED that resolves nowhere
    "undefined_symbol",        # c10::/at::/torch:: symbols torch does not export
    "no_gpu_code",             # no SM code in .nv_fatbin that runs on the GPU
    "glibc_version_missing",   # GLIBC_/GLIBCXX_/CXXABI_ version the host does not provide
    "not_elf",                 # a file named .so that is not ELF
    "corrupt_elf",             # truncated or malformed ELF
    "unreadable",              # permission denied and the like
    "broken_symlink",          # a symlink whose target is gone
    "dependency_unreadable",   # a resolved dependency that cannot be read
    "missing_python_name",     # python_api: an import of a name another distribution does not define
    "import_failed",           # second opinion: the real import failed
    "record_missing_file",     # RECORD lists a file that is not there
    "owner_conflict",          # the import name is claimed by more than one distribution
    "duplicate_distribution",  # two dist-info directories of one distribution (a broken install)
    "dist_info_unreadable",    # a dist-info file (METADATA, RECORD, ...) that cannot be read or parsed
    "torch_unreadable",        # torch's build facts could not be read from its files
    "requirements_unchecked",  # neither packaging nor uv could evaluate the requirements
    "arch_check_skipped",      # no GPU compute capability known
    "symbols_unchecked",       # an object without section headers: its symbols were not checked
    "python_api_incomplete",   # python_api: files of the import closure not parsed, or the walk cut short
)

SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


def make(kind, path, detail, severity=ERROR, **extra):
    if kind not in KINDS:
        raise ValueError("unknown finding kind %s" % kind)
    f = {"kind": kind, "path": path, "detail": detail, "severity": severity}
    f.update(extra)
    return f


def severity_for_load(load, required=False):
    """Severity of a file-level problem given how the file is loaded."""
    if load == "import" or required:
        return ERROR
    if load == "lazy":
        return WARNING
    return INFO


def sort_findings(findings):
    """Errors first, then by kind (root-cause order), then ``order`` where a kind has one (the order met:
    python_api's missing names in the order the server imports them), then path."""
    rank = dict((k, i) for i, k in enumerate(KINDS))
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f["severity"], 9), rank.get(f["kind"], 99),
                                           f.get("order", 0), f.get("path") or ""))


def errors(findings):
    return [f for f in findings if f["severity"] == ERROR]


def root_cause(findings):
    """The finding that names the failure (first error by kind order), or None."""
    errs = sort_findings(errors(findings))
    return errs[0] if errs else None


def message(findings, ok_text="compatible"):
    """One line: the root cause and the fix a person would take (``fix`` key), plus how many more errors,
    naming the other missing names where they are of the root cause's kind (python_api: every name the
    server would fail on, not only the first)."""
    top = root_cause(findings)
    if top is None:
        warns = [f for f in findings if f["severity"] == WARNING]
        if warns:
            plural = "" if len(warns) == 1 else "s"
            return "%s (%d warning%s: %s)" % (ok_text, len(warns), plural, sort_findings(warns)[0]["detail"])
        return ok_text
    text = top["detail"]
    if top.get("fix"):
        text += ": " + top["fix"]
    others = sort_findings(errors(findings))[1:]
    if others:
        names = [f["name"] for f in others if f["kind"] == top["kind"] and f.get("name")]
        text += " (and %d more error%s%s)" % (len(others), "" if len(others) == 1 else "s",
                                              ": " + ", ".join(names) if names else "")
    return text
