# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""torch build facts read from its files, without importing torch.

``torch/version.py`` carries ``__version__`` with the local tag (PyPI's
dist-info may say ``2.11.0`` while the build is ``2.11.0+cu130``) and
``cuda``; the dist-info gives the installed distribution's version.
"""

from __future__ import annotations

import os
import re

from ansible_collections.dflash.deploy.plugins.module_utils.elfload.cuda_compat import (
    cuda_from_local_tag,
    parse_version_major,
)
from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_text
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import local_tag

_ASSIGN = re.compile(r"^(__version__|cuda|git_version|hip|rocm|xpu|debug)\s*(?::[^=]*)?=\s*(.+?)\s*$")


def parse_version_py(text):
    """{name: value} of torch/version.py's simple assignments ('None' -> None)."""
    out = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if not m:
            continue
        raw = m.group(2)
        if raw in ("None", "False", "True"):
            out[m.group(1)] = {"None": None, "False": False, "True": True}[raw]
        elif len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
            out[m.group(1)] = raw[1:-1]
    return out


def torch_facts(site_packages, dists=None):
    """dict of torch facts, or None when torch is not installed.

    Keys: version (build version with local tag), distribution_version,
    local (e.g. 'cu130'), cuda (e.g. '13.0'), cuda_major, git_version,
    path (torch package dir), lib_dir, problems (list of str).
    """
    torch_dir = os.path.join(site_packages, "torch")
    dist = (dists or {}).get("torch")
    if dist is None and not os.path.isdir(torch_dir):
        return None
    facts = {"path": torch_dir, "lib_dir": os.path.join(torch_dir, "lib"), "problems": [],
             "distribution_version": dist["version"] if dist else None}
    vp = {}
    try:
        vp = parse_version_py(read_text(os.path.join(torch_dir, "version.py"), 1 << 20))
    except OSError as exc:
        facts["problems"].append("torch/version.py unreadable: %s" % (exc.strerror or exc))
    version = vp.get("__version__") or facts["distribution_version"]
    facts["version"] = version
    facts["local"] = local_tag(version)
    cuda = vp.get("cuda")
    if cuda is None and "cuda" not in vp:
        cuda = cuda_from_local_tag(facts["local"])
    facts["cuda"] = cuda
    facts["cuda_major"] = parse_version_major(cuda)
    facts["hip"] = vp.get("hip")
    facts["git_version"] = vp.get("git_version")
    if dist is None:
        facts["problems"].append("torch/ exists but no torch dist-info: not installed by an installer")
    elif not os.path.isdir(torch_dir):
        facts["problems"].append("torch dist-info exists but torch/ is missing")
    return facts
