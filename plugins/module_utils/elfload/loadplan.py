# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When a package loads each of its extension libraries.

``import sgl_kernel`` loads ``sm90/common_ops`` on compute capability 9.0 and
``sm100/common_ops`` otherwise; ``flash_ops`` (FA3), ``flashmla_ops`` and
``spatial_ops`` load lazily inside the feature that needs them.  Packages
without a plan are treated as loading every library at import.

``classify`` returns ``import``, ``lazy`` or ``unused`` (never loaded on
these GPUs), whether a configured feature requires it, and the GPUs that
would load it (its SM code is checked against those only).
"""

from __future__ import annotations

import os

# feature / attention backend name -> library stem it needs
FEATURE_LIBRARIES = {
    "fa3": "flash_ops",
    "flash_attn": "flash_ops",
    "flash_ops": "flash_ops",
    "flashmla": "flashmla_ops",
    "flash_mla": "flashmla_ops",
    "flashmla_ops": "flashmla_ops",
    "spatial": "spatial_ops",
    "spatial_ops": "spatial_ops",
}

LAZY_LIBRARIES = {
    "sgl_kernel": ("flash_ops", "flashmla_ops", "spatial_ops"),
}


def library_stem(filename):
    return os.path.basename(filename).split(".", 1)[0]


def required_libraries(features):
    out = set()
    for f in features or ():
        stem = FEATURE_LIBRARIES.get(str(f).strip().lower())
        if stem:
            out.add(stem)
    return out


def unknown_features(features):
    return [f for f in features or () if str(f).strip().lower() not in FEATURE_LIBRARIES]


def classify(package, relpath, gpu_ccs, features=()):
    """(load, required, gpus) for the library at ``relpath`` inside import package ``package``.

    ``gpu_ccs``: list of (major, minor) or None when unknown; ``gpus`` is the
    subset that would load this file (None = unknown).
    """
    stem = library_stem(relpath)
    required = stem in required_libraries(features)
    parts = relpath.replace("\\", "/").split("/")
    if package == "sgl_kernel":
        if stem == "common_ops" and len(parts) >= 2 and parts[-2] in ("sm90", "sm100"):
            if gpu_ccs is None:
                return "import", required, None
            if parts[-2] == "sm90":
                users = [cc for cc in gpu_ccs if cc == (9, 0)]
            else:
                users = [cc for cc in gpu_ccs if cc != (9, 0)]
                if not gpu_ccs:
                    return "import", required, []
            return ("import" if users else "unused"), required, users
        if stem in LAZY_LIBRARIES["sgl_kernel"]:
            return "lazy", required, gpu_ccs
    return "import", required, gpu_ccs
