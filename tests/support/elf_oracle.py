"""What pyelftools (the oracle our ELF reader is checked against) says about a shared object's dynamic section.

Imported by the tests as a plain module (pytest puts this directory on sys.path); pyelftools is imported by
the caller, so a test file can still skip itself when it is missing.
"""
from __future__ import annotations

# pyelftools' DT_* tag name -> the key in out, which is also the tag's attribute holding the string
_STRING_TAGS = {"DT_RPATH": "rpath", "DT_RUNPATH": "runpath", "DT_SONAME": "soname"}


def read_dynamic_tags(section, out):
    """Fill out's "needed" list (in order) and "rpath"/"runpath"/"soname" from a pyelftools DynamicSection."""
    for tag in section.iter_tags():
        name = tag.entry.d_tag
        if name == "DT_NEEDED":
            out["needed"].append(tag.needed)
        elif name in _STRING_TAGS:
            key = _STRING_TAGS[name]
            out[key] = getattr(tag, key)
    return out
