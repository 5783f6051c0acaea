# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CUDA compatibility rules: which CUDA major a library was built for, which
GPU code runs on which compute capability.

- CUDA major: read from the SONAMEs of cudart, cublas, cublasLt and nvrtc
  only (cufft/cusolver/cusparse/curand majors do not follow the toolkit).
- A cubin for sm_XY runs on compute capability X.Z with Z >= Y (same major
  only: sm_100 code does not run on 12.0).  Arch-specific builds (sm_90a)
  run on exactly X.Y.  Family-specific builds (sm_100f) run within the
  major, Z >= Y.  PTX (compute_XY) is JIT-compiled for any X.Y or newer,
  unless it is arch- or family-specific.
"""

from __future__ import annotations

import re

# the libraries whose SONAME major is the CUDA major
_SONAME_RE = re.compile(r"^(libcudart|libcublasLt|libcublas|libnvrtc)\.so\.(\d+)$")


def cuda_major_of_soname(name):
    """12 for 'libcudart.so.12', None for names that do not decide the CUDA major."""
    m = _SONAME_RE.match(name)
    return int(m.group(2)) if m else None


def cuda_majors(needed):
    """{major: [sonames]} for the deciding libraries among ``needed`` (DT_NEEDED names)."""
    out = {}
    for name in needed:
        major = cuda_major_of_soname(name)
        if major is not None:
            out.setdefault(major, []).append(name)
    return out


def parse_version_major(version):
    """13 for '13.0', None for None/''."""
    if not version:
        return None
    m = re.match(r"^\s*(\d+)", str(version))
    return int(m.group(1)) if m else None


def cuda_from_local_tag(local):
    """'13.0' for 'cu130', '12.8' for 'cu128', None otherwise."""
    m = re.match(r"^cu(\d+)(\d)$", local or "")
    if not m:
        return None
    return "%s.%s" % (m.group(1), m.group(2))


def parse_cc(value):
    """(12, 0) from '12.0', 12.0, '120', 'sm_120' or (12, 0). Raises ValueError."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return int(value[0]), int(value[1])
    text = str(value).strip().lower()
    if text.startswith("sm_"):
        text = text[3:].rstrip("af")
    m = re.match(r"^(\d+)\.(\d+)$", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(\d+)(\d)$", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    raise ValueError("not a compute capability: %r (expected e.g. '12.0')" % (value,))


def format_cc(cc):
    return "%d.%d" % cc


def sm_to_cc(sm):
    """(9, 0) from 90, (12, 0) from 120."""
    return sm // 10, sm % 10


def entry_runs_on(entry, cc):
    """Whether one fatbin entry (dict from fatbin.scan) can run on compute capability ``cc``."""
    major, minor = sm_to_cc(entry["sm"])
    gmaj, gmin = cc
    variant = entry.get("variant", "")
    if variant == "a":
        return (gmaj, gmin) == (major, minor)
    if entry["kind"] == "cubin" or variant == "f":
        return gmaj == major and gmin >= minor
    if entry["kind"] == "ptx":
        return (gmaj, gmin) >= (major, minor)
    return False


def usable_code(entries, cc):
    """Arch names (sm_XY / compute_XY) among ``entries`` that run on ``cc``."""
    return sorted(set(e["arch"] for e in entries if entry_runs_on(e, cc)))
