"""abicheck/openable.py: would the loader open the file at all (each rule alone, then open_elf on real files)."""
from __future__ import annotations

import abi_native as N
import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import openable as O
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.process import Process
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldresolve import Resolver

HOST = (64, "little", "x86_64")


def test_a_dangling_symlink_is_named_with_its_target(tmp_path):
    link = tmp_path / "ext.so"
    link.symlink_to("gone.so")
    found = O.broken_symlink(str(link), "pkg/ext.so")
    assert (found.kind, found.detail, found.fix) == (
        "broken_symlink", "pkg/ext.so is a symlink to gone.so, which does not exist",
        "reinstall the distribution that owns it")
    (tmp_path / "gone.so").write_bytes(b"")
    assert O.broken_symlink(str(link), "pkg/ext.so") is None  # the target is back: not broken
    assert O.broken_symlink(str(tmp_path / "gone.so"), "pkg/gone.so") is None  # not a link at all


@pytest.mark.parametrize("kind,detail,fix", [
    ("unreadable", "Permission denied", "fix the file's permissions or ownership"),
    ("not_elf", "no ELF magic (not a shared object)", "reinstall the distribution that owns it"),
    ("corrupt_elf", "malformed ELF header", "reinstall the distribution that owns it (the file is damaged or "
                                            "truncated)"),
    ("unreadable", "is a FIFO, not a regular file", "replace it with the library itself: reinstall the "
                                                    "distribution that owns it"),
])
def test_an_unreadable_file_keeps_its_kind_and_gets_its_fix(kind, detail, fix):
    found = O.unreadable(ElfError(kind, "/site/pkg/ext.so", detail), "pkg/ext.so")
    assert (found.kind, found.detail, found.fix, found.severity) == (kind, "pkg/ext.so: " + detail, fix, None)


def test_wrong_architecture_compares_class_byte_order_and_machine():
    assert O.wrong_architecture(list(HOST), HOST, "pkg/ext.so") is None
    found = O.wrong_architecture((32, "little", "i386"), HOST, "pkg/ext.so")
    assert found.detail == ("pkg/ext.so is ELF 32-bit little-endian i386, but this venv's Python is 64-bit "
                            "little-endian x86_64")
    assert found.fix == "install the distribution's build for x86_64 (64-bit)"
    for other in ((64, "big", "x86_64"), (64, "little", "aarch64")):
        assert O.wrong_architecture(other, HOST, "pkg/ext.so").kind == "wrong_architecture"


def test_a_file_without_section_headers_is_an_info_not_a_refusal():
    assert O.without_sections({"has_sections": True}, "pkg/ext.so") is None
    assert O.without_sections({}, "pkg/ext.so") is None  # read_summary always says; absent means sections
    found = O.without_sections({"has_sections": False}, "pkg/ext.so")
    assert (found.kind, found.severity) == ("symbols_unchecked", "info")


def test_dynamic_facts_are_what_a_playbook_registers():
    summary = {"soname": "libx.so", "rpath": "$ORIGIN", "runpath": None, "machine": "x86_64", "needed": ["a"]}
    assert O.dynamic_facts(summary) == {"soname": "libx.so", "rpath": "$ORIGIN", "runpath": None,
                                        "machine": "x86_64"}


def _process(tmp_path):
    return Process(str(tmp_path), Resolver(SystemLibraries("/", None)), None, [(9, 0)], ())


def test_open_elf_on_a_library_a_text_file_and_a_dangling_link(tmp_path):
    process = _process(tmp_path)
    try:
        lib = N.build_lib(tmp_path / "ext.so", "int f(void){return 0;}")
        opened = O.open_elf(process, str(lib), "ext.so")
        assert opened.loadable and opened.problems == () and opened.summary["path"] == str(lib)
        assert opened.elf is process.handles[str(lib)]  # opened once, closed with the process
        (tmp_path / "text.so").write_text("not a library\n")
        opened = O.open_elf(process, str(tmp_path / "text.so"), "text.so")
        assert (opened.loadable, opened.elf, opened.summary) == (False, None, None)
        assert [p.kind for p in opened.problems] == ["not_elf"]
        (tmp_path / "link.so").symlink_to("nowhere.so")
        opened = O.open_elf(process, str(tmp_path / "link.so"), "link.so")
        assert not opened.loadable and [p.kind for p in opened.problems] == ["broken_symlink"]
    finally:
        process.close()
    assert process.handles == {}


def test_open_elf_reports_the_facts_of_a_file_of_another_machine(tmp_path, monkeypatch):
    process = _process(tmp_path)
    monkeypatch.setattr(process, "host_identity", lambda: (64, "little", "aarch64"))
    try:
        lib = N.build_lib(tmp_path / "ext.so", "int f(void){return 0;}", soname="libext.so")
        opened = O.open_elf(process, str(lib), "ext.so")
        assert not opened.loadable and [p.kind for p in opened.problems] == ["wrong_architecture"]
        assert opened.summary["soname"] == "libext.so"  # read: its facts are still reported
    finally:
        process.close()
