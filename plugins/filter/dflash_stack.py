# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DFlash kernel stack a DFlash-capable sglang declares, read from the source itself.

sglang 0.5.11's Requires-Dist pins the kernel stack (``sglang-kernel==0.4.2``,
``flashinfer_python==0.6.8.post1``, ``torch==2.11.0``, ...); a captured tree
declares the same in its ``pyproject.toml``. The roles keep no list of their
own: kernel_pin installs, and verification checks, what this filter picks out
of the source's requirements.

    pins = requires | dflash.deploy.dflash_stack(['sglang-kernel', 'flashinfer-python', 'torch'])

Each requirement whose name (PEP 503 normalised) is listed comes back as
``<normalised name><specifier>`` (``flashinfer_python == 0.6.8.post1`` gives
``flashinfer-python==0.6.8.post1``), in the order of the source; environment
markers are dropped, and a requirement that only applies to an extra
(``; extra == "..."``) is left out. Text that is not a requirement is left out.
"""
from __future__ import annotations

import re

_NORM = re.compile(r"[-_.]+")
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;(.*))?$")
_EXTRA = re.compile(r"\bextra\s*==")


def normalize(name: str) -> str:
    """PEP 503 name normalisation: runs of -, _ and . become one -, lower case."""
    return _NORM.sub("-", str(name)).lower()


def dflash_stack(requires, names) -> list:
    """The requirements of ``requires`` whose distribution is one of ``names``, as ``name<specifier>``."""
    wanted = {normalize(n) for n in (names or [])}
    out = []
    for text in requires or []:
        match = _REQ.match(str(text))
        if not match:
            continue
        name, spec, marker = match.group(1), match.group(2), match.group(3)
        if normalize(name) not in wanted or (marker and _EXTRA.search(marker)):
            continue
        spec = re.sub(r"\s+", "", spec.strip("()"))
        item = normalize(name) + spec
        if item not in out:
            out.append(item)
    return out


class FilterModule:
    def filters(self):
        return {"dflash_stack": dflash_stack}
