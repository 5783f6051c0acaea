"""abicheck/symbol_versions.py: the versions a file needs against those its providers define."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import symbol_versions as V
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError


class _Elf:
    def __init__(self, needs):
        self.needs = needs

    def version_needs(self):
        if isinstance(self.needs, Exception):
            raise self.needs
        return self.needs


class _Process:
    def __init__(self, defs):
        self.defs = defs

    def version_defs(self, path):
        return self.defs.get(path)


def test_version_key_orders_by_family_then_numbers():
    names = ["GLIBC_2.38", "GLIBC_2.4", "GLIBC_2.17", "GLIBC_PRIVATE", "GLIBCXX_3.4.9", "GLIBCXX_3.4.32"]
    assert sorted(names, key=V.version_key) == ["GLIBC_PRIVATE", "GLIBC_2.4", "GLIBC_2.17", "GLIBC_2.38",
                                                "GLIBCXX_3.4.9", "GLIBCXX_3.4.32"]
    assert V.family("GLIBCXX_3.4.32") == "GLIBCXX" and V.family("CXXABI_TM_1") == "CXXABI"


def test_newest_needed_missing_and_defined():
    assert V.newest_needed({"libc.so.6": ["GLIBC_2.4", "GLIBC_2.34"], "libm.so.6": []}) == {"libc.so.6": ["GLIBC_2.34"]}
    missing = V.missing_versions(["GLIBC_2.38", "GLIBC_2.2.5", "GLIBC_2.34"], {"GLIBC_2.2.5"})
    assert missing == ["GLIBC_2.34", "GLIBC_2.38"]
    defs = {"GLIBCXX_3.4.30", "GLIBCXX_3.4.9", "CXXABI_1.3.13"}
    assert V.newest_defined(defs, "GLIBCXX") == "GLIBCXX_3.4.30"
    assert V.newest_defined(defs, "GLIBC") == "none"


def test_symbol_versions_against_each_resolved_provider():
    needs = {"libstdc++.so.6": ["GLIBCXX_3.4.32", "CXXABI_1.3.13"], "libc.so.6": ["GLIBC_2.34"],
             "libgone.so": ["GONE_1.0"], "libblind.so": ["B_2.0"]}
    resolved = {"libstdc++.so.6": "/lib/libstdc++.so.6", "libc.so.6": "/lib/libc.so.6", "libblind.so": "/b.so"}
    process = _Process({"/lib/libstdc++.so.6": {"GLIBCXX_3.4.30", "CXXABI_1.3.13"},
                        "/lib/libc.so.6": {"GLIBC_2.34", "GLIBC_2.2.5"}})
    result = V.symbol_versions(process, _Elf(needs), "pkg/ext.so", resolved)
    assert result.newest_needed == {"libstdc++.so.6": ["GLIBCXX_3.4.32"], "libc.so.6": ["GLIBC_2.34"],
                                    "libgone.so": ["GONE_1.0"], "libblind.so": ["B_2.0"]}
    assert [(p.kind, p.detail, dict(p.extra)) for p in result.problems] == [
        ("glibc_version_missing", "pkg/ext.so needs GLIBCXX_3.4.32 from libstdc++.so.6 but /lib/libstdc++.so.6 "
                                  "provides up to GLIBCXX_3.4.30", {"versions": ["GLIBCXX_3.4.32"]})]
    assert result.problems[0].fix == "use a build made for this host's older C/C++ runtime, or a newer OS image"


def test_an_unreadable_version_table_is_corrupt():
    for exc in (ElfError("corrupt_elf", "/x", "bad"), ValueError("bad"), IndexError("bad")):
        result = V.symbol_versions(_Process({}), _Elf(exc), "pkg/ext.so", {})
        assert result.newest_needed == {}
        assert [(p.kind, p.detail) for p in result.problems] == [
            ("corrupt_elf", "pkg/ext.so: cannot read .gnu.version_r (%s)" % exc)]
