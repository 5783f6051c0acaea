"""abi.check: what cosmic-ray found unguarded in module_utils/abi_check.py (issue 14), as the user reads it.

The findings' detail and fix are what abi_check prints; the per-file facts (`files`) are what a
playbook registers. Small real ELF files built with gcc (abi_native), no GPU needed.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "modules"))
import abi_native as N
from test_hostile_inputs import _dist, _patch_machine, _pkg_venv, _venv

CC = [(9, 0)]


def _by_kind(result):
    return {f["kind"]: f for f in result["findings"]}


def test_fixes_name_the_package_and_the_library(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    dep = N.build_lib(tmp_path / "build" / "libgone.so.3", "int dep(void){return 1;}", soname="libgone.so.3")
    N.build_lib(site / "pkg" / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep])
    dep.unlink()
    dirs = [str(tmp_path / ("d%02d" % i)) for i in range(15)]
    result = abi.check(str(venv), packages=["pkg", "absent_pkg", "../etc"], gpu_ccs=CC,
                       environment={"LD_LIBRARY_PATH": ":".join(dirs)})
    found = _by_kind(result)
    assert found["library_not_found"]["fix"] == ("install the distribution that provides libgone.so.3 or add its "
                                                 "directory to LD_LIBRARY_PATH in environment")
    assert found["library_not_found"]["searched"] == dirs[:12]  # the first twelve places the loader looked
    bad = [f for f in result["findings"] if f["kind"] == "package_not_found"]
    assert [(f["path"], f["fix"]) for f in bad] == [
        ("../etc", "name the package, e.g. sgl_kernel"),
        ("absent_pkg", "install the distribution that provides absent_pkg")]
    assert "'../etc' is not an import or distribution name" in bad[0]["detail"]
    assert result["packages"] == {"pkg": {"import_name": "pkg", "distributions": ["pkg"], "files": 1}}


def test_a_library_missing_further_down_names_who_needs_it(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so", "libmid.so"])
    gone = N.build_lib(tmp_path / "build" / "libgone.so", "int g(void){return 1;}", soname="libgone.so")
    mid = N.build_lib(site / "pkg" / "libmid.so", "int g(void); int m(void){return g();}", soname="libmid.so",
                      libs=[gone])
    N.build_lib(site / "pkg" / "ext.so", "int m(void); int f(void){return m();}", libs=[mid], rpath="$ORIGIN")
    gone.unlink()
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    details = [f["detail"] for f in result["findings"] if f["kind"] == "library_not_found"]
    assert "pkg/ext.so needs libgone.so, which the loader cannot find (needed by pkg/libmid.so)" in details
    assert "pkg/libmid.so needs libgone.so, which the loader cannot find" in details


def test_distribution_named_package_counts_only_its_libraries(tmp_path):
    """A distribution name whose files live under another import name: only its .so files, never ../ paths."""
    venv, site = _venv(tmp_path)
    files = ["mykern/__init__.py", "mykern/ops.so", "mykern/data.txt", "../../../lib/libout.so"]
    _dist(site, "my-kernels", "1.0", files=files)
    (site / "my_kernels-1.0.dist-info" / "top_level.txt").write_text("mykern\n")
    (site / "mykern").mkdir()
    (site / "mykern" / "__init__.py").write_text("")
    (site / "mykern" / "data.txt").write_text("not a library\n")
    N.build_lib(site / "mykern" / "ops.so", "int f(void){return 0;}")
    N.build_lib(venv / "lib" / "libout.so", "int g(void){return 0;}")  # a library outside site-packages
    result = abi.check(str(venv), packages=["my-kernels"], gpu_ccs=CC)
    assert result["packages"]["my-kernels"] == {"import_name": "mykern", "distributions": ["my-kernels"],
                                                "files": 1}
    assert [f["path"] for f in result["files"]] == [str(site / "mykern" / "ops.so")]
    assert result["compatible"] is True, result["msg"]


def test_single_file_extension_module(tmp_path):
    """A top-level mod.<tag>.so: that file only, not the other top-level libraries nor mod.py."""
    venv, site = _venv(tmp_path)
    N.build_lib(site / "fastmod.cpython-311-x86_64-linux-gnu.so", "int f(void){return 0;}")
    N.build_lib(site / "other.so", "int g(void){return 0;}")
    (site / "fastmod.py").write_text("")
    result = abi.check(str(venv), packages=["fastmod"], gpu_ccs=CC)
    assert result["packages"]["fastmod"]["files"] == 1
    assert [f["path"] for f in result["files"]] == [str(site / "fastmod.cpython-311-x86_64-linux-gnu.so")]


def test_versions_needed_name_the_newest_missing_and_the_newest_defined(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    libdir = tmp_path / "lib"
    body = "int d1(void){return 1;} int d2(void){return 2;} int d3(void){return 3;}"
    newer = ("DEP_1.0 { global: d1; local: *; };\nDEP_2.0 { global: d2; } DEP_1.0;\n"
             "DEP_3.0 { global: d3; } DEP_2.0;\n")
    dep = N.build_lib(libdir / "libdep.so", body, soname="libdep.so", version_script=newer)
    N.build_lib(site / "pkg" / "ext.so", "int d1(void); int d2(void); int d3(void);"
                "int f(void){return d1() + d2() + d3();}", libs=[dep], rpath=str(libdir))
    ok = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert ok["compatible"] is True, ok["msg"]
    assert ok["files"][0]["version_needs"]["libdep.so"] == ["DEP_3.0"]  # the newest one needed
    older = "DEP_1.0 { global: d1; local: *; };\nDEP_1.5 { global: d2; d3; } DEP_1.0;\n"
    N.build_lib(libdir / "libdep.so", body, soname="libdep.so", version_script=older)
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["glibc_version_missing"]
    assert found["detail"] == "pkg/ext.so needs DEP_3.0 from libdep.so but %s provides up to DEP_1.5" % dep
    assert found["versions"] == ["DEP_2.0", "DEP_3.0"]


def _undefined(n, prefix="sym"):
    decl = " ".join("int %s%d(void);" % (prefix, i) for i in range(n))
    return decl + " int f(void){return %s;}" % " + ".join("%s%d()" % (prefix, i) for i in range(n))


def test_symbols_no_library_exports_sample_five_and_blame_a_dependency(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    N.build_lib(site / "pkg" / "ext.so", _undefined(7))
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["undefined_symbol"]
    assert found["count"] == 7 and found["symbols"] == ["sym0", "sym1", "sym2", "sym3", "sym4"]
    assert found["detail"] == "pkg/ext.so needs 7 symbols that no library in its load scope exports (e.g. sym0)"
    assert found["fix"] == "a dependency is older than the one the extension was built against: update it or rebuild"
    assert result["files"][0]["symbols_missing"] == 7


def test_cu_symbols_missing_blame_the_driver_only_when_libcuda_is_there(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    # no libcuda: the cu* symbols are a dependency's
    N.build_lib(site / "pkg" / "ext.so", _undefined(1, "cuNewCall"))
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["undefined_symbol"]
    assert found["detail"] == ("pkg/ext.so needs 1 symbol that no library in its load scope exports "
                               "(e.g. cuNewCall0)")
    assert found["fix"].startswith("a dependency is older")
    # an old driver library that lacks them: the driver is named
    drv = tmp_path / "driver"
    cuda = N.build_lib(drv / "libcuda.so.1", "int cuInit(void){return 0;}", soname="libcuda.so.1")
    N.build_lib(site / "pkg" / "ext.so", _undefined(1, "cuNewCall"), libs=[cuda], rpath=str(drv),
                extra_objects=["-Wl,--no-as-needed"])  # linked although none of its symbols is used
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["undefined_symbol"]
    assert found["fix"] == ("the NVIDIA driver's libcuda.so.1 (%s) is older than the extension needs: update "
                            "the driver" % cuda)


def test_record_listing_one_missing_library(tmp_path):
    """Only missing files (no broken links): still reported, singular, and an error when the library is eager."""
    venv, site = _pkg_venv(tmp_path, ["ext.so", "gone.so"])
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["record_missing_file"]
    assert found["detail"] == "RECORD of pkg 1.0 lists 1 missing file (e.g. pkg/gone.so)"
    assert found["severity"] == "error" and found["fix"] == "reinstall pkg"
    assert result["compatible"] is False


def test_an_invalid_name_first_does_not_stop_the_others(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}")
    result = abi.check(str(venv), packages=["../etc", "pkg"], gpu_ccs=CC)
    assert [f["path"] for f in result["files"]] == [str(site / "pkg" / "ext.so")]


def test_a_symlink_to_a_library_is_checked_not_called_broken(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so", "libreal.so"])
    N.build_lib(site / "pkg" / "libreal.so", "int f(void){return 0;}")
    (site / "pkg" / "ext.so").symlink_to("libreal.so")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["compatible"] is True and "broken_symlink" not in _by_kind(result), result["findings"]
    assert len(result["files"]) == 2


def test_record_listing_several_missing_files(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["a.py", "b.py", "ext.so"])
    (site / "pkg" / "ext.so").symlink_to("nowhere.so")
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["record_missing_file"]
    assert found["detail"] == "RECORD of pkg 1.0 lists 3 missing files (e.g. pkg/a.py)"


# -- a torch of our own: libc10.so exporting a few c10:: symbols, torch/version.py with the local tag ----------------

def _c_decls(names, prefix="u"):
    """C source calling functions whose symbol names are ``names`` (mangled C++ names through asm labels)."""
    decl = "".join('int %s%d(void) __asm__("%s");\n' % (prefix, i, n) for i, n in enumerate(names))
    calls = " + ".join("%s%d()" % (prefix, i) for i in range(len(names))) or "0"
    return decl + "int f(void){return %s;}\n" % calls


def _torch(site, version="2.9.1+cu128", cuda="12.8", exports=("_ZN3c104realEv",), libs=()):
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "version.py").write_text("__version__ = %r\ncuda = %r\n" % (version, cuda))
    _dist(site, "torch", version.split("+")[0], files=["torch/__init__.py", "torch/version.py", "torch/lib/libc10.so"])
    body = "".join('int e%d(void) __asm__("%s"); int e%d(void){return %d;}\n' % (i, n, i, i)
                   for i, n in enumerate(exports))
    return N.build_lib(site / "torch" / "lib" / "libc10.so", body, soname="libc10.so", libs=libs,
                       extra_objects=["-Wl,--no-as-needed"])


def test_torch_symbols_torch_does_not_export_are_sampled_and_counted(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    c10 = _torch(site)
    missing = ["_ZN3c105miss%dEv" % i for i in range(6)]
    N.build_lib(site / "pkg" / "ext.so", _c_decls(["_ZN3c104realEv"] + missing), libs=[c10])
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["undefined_symbol"]
    assert found["detail"] == ("pkg/ext.so needs 6 c10/at/torch symbols that torch 2.9.1+cu128 does not export "
                               "(e.g. _ZN3c105miss0Ev)")
    assert found["fix"] == ("the extension was built against another torch: install the pkg build made for torch "
                            "2.9.1+cu128, or the torch it was built for")
    assert found["symbols"] == missing[:5] and found["count"] == 6
    info = result["files"][0]
    assert (info["torch_symbols_needed"], info["torch_symbols_missing"], info["symbols_missing"]) == (7, 6, 6)
    assert result["compatible"] is False
    # one symbol, with the old C++ ABI's std::string: singular, and the hint
    N.build_lib(site / "pkg" / "ext.so", _c_decls(["_ZN3c104realEv", "_ZN3c104warnERKSs"]), libs=[c10])
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["undefined_symbol"]
    assert found["detail"] == ("pkg/ext.so needs 1 c10/at/torch symbol that torch 2.9.1+cu128 does not export "
                               "(e.g. _ZN3c104warnERKSs); old C++ ABI (std::string as Ss)")
    # all of them exported: compatible, nothing missing
    N.build_lib(site / "pkg" / "ext.so", _c_decls(["_ZN3c104realEv"]), libs=[c10])
    ok = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert ok["compatible"] is True, ok["msg"]
    assert ok["files"][0]["torch_symbols_missing"] == 0


def test_torch_symbols_without_torch_are_not_counted_as_torchs(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    N.build_lib(site / "pkg" / "ext.so", _c_decls(["_ZN3c104realEv"]))
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["torch"] is None
    assert result["files"][0]["torch_symbols_missing"] is None  # no torch: nothing to compare with
    assert result["files"][0]["symbols_missing"] == 1


# -- the interpreter: the start of the symbol scope and the loader's reference for the ELF identity ---------------

def _python_with_libpython():
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import read_summary
    exe = os.path.realpath(sys.executable)
    if not any(n.startswith("libpython") for n in read_summary(exe)["needed"]):
        pytest.skip("this Python does not link libpython")
    return exe


def test_python_symbols_are_looked_up_in_the_venvs_interpreter_and_libpython(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    N.build_lib(site / "pkg" / "ext.so", _c_decls(["PyLong_FromLong", "PyDflash_NoSuchCall", "nowhere_sym"]))
    # no interpreter in the venv: the Py symbols cannot be checked; the others are
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["undefined_symbol"]
    assert (found["count"], found["symbols"]) == (1, ["nowhere_sym"])
    # a Python linked with libpython: PyLong_FromLong comes from libpython, the made-up call from nowhere
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to(_python_with_libpython())
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["undefined_symbol"]
    assert (found["count"], found["symbols"]) == (2, ["PyDflash_NoSuchCall", "nowhere_sym"])
    N.build_lib(site / "pkg" / "ext.so", _c_decls(["PyLong_FromLong"]))
    ok = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert ok["compatible"] is True, ok["msg"]


def test_the_venvs_python_decides_the_architecture(tmp_path):
    """An x86_64 extension in a venv whose Python is an aarch64 binary (a venv made for another host)."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    gone = N.build_lib(tmp_path / "build" / "libgone.so", "int g(void){return 1;}", soname="libgone.so")
    N.build_lib(site / "pkg" / "ext.so", "int g(void); int f(void){return g();}", libs=[gone])
    gone.unlink()
    (venv / "bin").mkdir()
    python = venv / "bin" / "python"
    shutil.copy(os.path.realpath(sys.executable), python)
    _patch_machine(python, 183)
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["wrong_architecture"]
    assert found["detail"] == ("pkg/ext.so is ELF 64-bit little-endian x86_64, but this venv's Python is 64-bit "
                               "little-endian aarch64")
    assert found["fix"] == "install the distribution's build for aarch64 (64-bit)"
    assert [f["kind"] for f in result["findings"]] == ["wrong_architecture"]  # the loader stops there
    assert result["compatible"] is False


# -- damaged files past the header checks: the finding names what is unreadable, and the check goes on -------------

def _section_header(data, name):
    """(file offset of the Elf64_Shdr called ``name``, its sh_offset)."""
    import struct
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    str_off, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 24)
    for i in range(shnum):
        at = shoff + i * shentsize
        name_off, = struct.unpack_from("<I", data, at)
        end = data.index(b"\0", str_off + name_off)
        if data[str_off + name_off:end].decode() == name:
            return at, struct.unpack_from("<Q", data, at + 24)[0]
    raise KeyError(name)


def _damage(path, name, field):
    """Damage one section of a real library: the .dynsym entry size, the .gnu.hash header or a string table link."""
    import struct
    data = bytearray(path.read_bytes())
    at, offset = _section_header(data, name)
    if field == "entsize":
        struct.pack_into("<Q", data, at + 56, 1)
    elif field == "nbuckets":
        struct.pack_into("<I", data, offset, 0)
    elif field == "link":
        struct.pack_into("<I", data, at + 40, 999)
    path.write_bytes(bytes(data))


def _ext_needing_dep(tmp_path, version):
    """pkg/ext.so calling dep() from libdep.so, which defines it at ``version`` (found through the RPATH)."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    dep = N.build_lib(tmp_path / "build" / "libdep.so", "int dep(void){return 1;}", soname="libdep.so",
                      version_script="%s { global: dep; local: *; };\n" % version)
    ext = N.build_lib(site / "pkg" / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep],
                      rpath=str(dep.parent))
    return venv, dep, ext


def test_unreadable_dynamic_symbols_are_reported_and_the_other_checks_run(tmp_path):
    venv, dep, ext = _ext_needing_dep(tmp_path, "DEP_2.0")
    _damage(ext, ".dynsym", "entsize")
    N.build_lib(dep, "int dep(void){return 1;}", soname="libdep.so",
                version_script="DEP_1.0 { global: dep; local: *; };\n")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)
    assert found["corrupt_elf"]["detail"] == "pkg/ext.so: cannot read dynamic symbols (.dynsym entry size 1 too small)"
    assert "glibc_version_missing" in found  # the version check still ran
    assert result["compatible"] is False


def test_a_damaged_version_table_is_reported_when_the_file_is_opened(tmp_path):
    venv, dep, ext = _ext_needing_dep(tmp_path, "DEP_1.0")
    _damage(ext, ".gnu.version_r", "link")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert [(f["kind"], f["path"]) for f in result["findings"]] == [("corrupt_elf", "pkg/ext.so")]
    assert ".gnu.version_r links to a missing string table" in result["findings"][0]["detail"]


def test_a_version_table_damaged_after_the_file_was_opened_is_reported_not_a_crash(tmp_path, monkeypatch):
    """The file is read twice (its summary when opened, its version needs when they are compared): a file
    rewritten in between (a pip install running beside the check) gives a finding, and the check goes on."""
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload import elf

    venv, _dep, _ext = _ext_needing_dep(tmp_path, "DEP_1.0")
    reads = []
    first_read = elf.ElfFile.version_needs

    def rewritten_after_the_first_read(self):
        if not str(self.path).endswith("ext.so"):
            return first_read(self)
        reads.append(self)
        if len(reads) == 1:
            return first_read(self)
        raise elf.ElfError("corrupt_elf", "ext.so", ".gnu.version_r runs past the end of the file")

    monkeypatch.setattr(elf.ElfFile, "version_needs", rewritten_after_the_first_read)
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert [(f["kind"], f["path"], f["detail"]) for f in result["findings"]] == [
        ("corrupt_elf", "pkg/ext.so",
         "pkg/ext.so: cannot read .gnu.version_r (ext.so: .gnu.version_r runs past the end of the file)")]
    assert result["files"][0]["version_needs"] == {} and len(reads) == 2


def test_a_dependency_with_a_damaged_hash_table_does_not_hide_the_next_ones_symbols(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    build = tmp_path / "build"
    bad = N.build_lib(build / "libbad.so", "int b(void){return 1;}", soname="libbad.so")
    good = N.build_lib(build / "libgood.so", "int g(void){return 2;}", soname="libgood.so")
    N.build_lib(site / "pkg" / "ext.so", "int b(void); int g(void); int f(void){return b() + g();}",
                libs=[bad, good], rpath=str(build))
    _damage(bad, ".gnu.hash", "nbuckets")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    missing = [f for f in result["findings"] if f["kind"] == "undefined_symbol"]
    assert [f["symbols"] for f in missing] == [["b"]], result["findings"]  # g is found in libgood.so


def _aaa_and_an_older_dep(tmp_path, spoil):
    """pkg/ext.so needs AAA_1.0 of libaaa.so and DEP_2.0 of libdep.so; ``spoil`` then damages or removes libaaa.so,
    and libdep.so is replaced by one defining only DEP_1.0. Returns (libdep.so's path, the check's result)."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    build = tmp_path / "build"
    aaa = N.build_lib(build / "libaaa.so", "int a(void){return 1;}", soname="libaaa.so",
                      version_script="AAA_1.0 { global: a; local: *; };\n")
    dep = N.build_lib(build / "libdep.so", "int d(void){return 1;}", soname="libdep.so",
                      version_script="DEP_2.0 { global: d; local: *; };\n")
    N.build_lib(site / "pkg" / "ext.so", "int a(void); int d(void); int f(void){return a() + d();}",
                libs=[aaa, dep], rpath=str(build))
    spoil(aaa)
    N.build_lib(dep, "int d(void){return 1;}", soname="libdep.so", version_script="DEP_1.0 { global: d; local: *; };\n")
    return dep, abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)


def test_a_provider_whose_version_definitions_are_unreadable_is_skipped_not_the_next(tmp_path):
    dep, result = _aaa_and_an_older_dep(tmp_path, lambda aaa: _damage(aaa, ".gnu.version_d", "link"))
    found = [f for f in result["findings"] if f["kind"] == "glibc_version_missing"]
    assert [f["detail"] for f in found] == ["pkg/ext.so needs DEP_2.0 from libdep.so but %s provides up to DEP_1.0"
                                            % dep]


def test_versions_of_a_library_that_is_not_found_are_not_compared(tmp_path):
    """libaaa.so (sorted first) is missing: reported once as not found; libdep.so's versions are still checked."""
    _dep, result = _aaa_and_an_older_dep(tmp_path, Path.unlink)
    assert sorted(f["kind"] for f in result["findings"] if f["severity"] == "error") == [
        "glibc_version_missing", "library_not_found"]
    assert result["files"][0]["version_needs"] == {"libaaa.so": ["AAA_1.0"], "libdep.so": ["DEP_2.0"]}


def test_provides_up_to_names_the_version_of_the_same_family(tmp_path):
    """A library defining two version families (like libstdc++'s GLIBCXX_ and CXXABI_): the newest missing one and the
    newest defined one of that family."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    build = tmp_path / "build"
    body = "int a(void){return 1;} int z(void){return 2;}"
    new = "AAA_2.0 { global: a; local: *; };\nZZZ_2.0 { global: z; };\n"
    dep = N.build_lib(build / "libdep.so", body, soname="libdep.so", version_script=new)
    N.build_lib(site / "pkg" / "ext.so", "int a(void); int z(void); int f(void){return a() + z();}", libs=[dep],
                rpath=str(build))
    old = "AAA_1.0 { global: a; local: *; };\nZZZ_1.0 { global: z; };\nZZZ_1.5 { global: z; } ZZZ_1.0;\n"
    N.build_lib(dep, body, soname="libdep.so", version_script=old)
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["glibc_version_missing"]
    assert found["detail"] == "pkg/ext.so needs ZZZ_2.0 from libdep.so but %s provides up to ZZZ_1.5" % dep
    assert found["versions"] == ["AAA_2.0", "ZZZ_2.0"]


def test_symbols_that_may_come_from_a_library_without_section_headers(tmp_path):
    """Exports of an object without section headers cannot be read: the symbols found nowhere else are an info."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    build = tmp_path / "build"
    blind1 = N.build_lib(build / "libblind1.so", "int a(void){return 1;}", soname="libblind1.so")
    blind2 = N.build_lib(build / "libblind2.so", "int c(void){return 1;}", soname="libblind2.so")
    good = N.build_lib(build / "libgood.so", "int g(void){return 2;}", soname="libgood.so")
    N.build_lib(site / "pkg" / "ext.so", "int a(void); int c(void); int g(void); int x(void);"
                "int f(void){return a() + c() + g() + x();}", libs=[blind1, blind2, good], rpath=str(build))
    for lib in (blind1, blind2):
        data = bytearray(lib.read_bytes())
        data[0x28:0x30] = b"\0" * 8  # e_shoff
        data[0x3C:0x40] = b"\0" * 4  # e_shnum, e_shstrndx
        lib.write_bytes(bytes(data))
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    unchecked = [f for f in result["findings"] if f["kind"] == "symbols_unchecked"]
    assert [(f["detail"], f["severity"]) for f in unchecked] == [
        ("pkg/ext.so: 3 undefined symbol(s) not found elsewhere may come from %s, which has no section headers"
         % blind1, "info")]
    assert result["compatible"] is True, result["msg"]
    assert result["files"][0]["symbols_missing"] == 0


def test_an_extension_without_section_headers_says_its_symbols_were_not_checked(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    lib = N.build_lib(site / "pkg" / "ext.so", _undefined(2))
    data = bytearray(lib.read_bytes())
    data[0x28:0x30] = b"\0" * 8
    data[0x3C:0x40] = b"\0" * 4
    lib.write_bytes(bytes(data))
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert [(f["kind"], f["detail"]) for f in result["findings"]] == [
        ("symbols_unchecked", "pkg/ext.so has no section headers (the loader needs none): its symbols and versions "
         "were not checked")]


# -- the CUDA major of each file against torch's -------------------------------------------------------------------

def _fake_root(tmp_path):
    """A system root holding only this host's libc (all a gcc-built library needs): whatever CUDA libraries the host
    has stay out of the check."""
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "libc.so.6").symlink_to(SystemLibraries("/", None).find("libc.so.6"))
    return root


def _ext_needing(site, build, names):
    """pkg/ext.so calling one function of each library ``names`` (built in ``build``, found through RPATH)."""
    libs = [N.build_lib(build / n, "int %s_f(void){return 0;}" % n.split(".")[0], soname=n) for n in names]
    N.build_lib(site / "pkg" / "ext.so", _c_decls(["%s_f" % n.split(".")[0] for n in names]), libs=libs,
                rpath=str(build))
    return libs


@pytest.mark.parametrize("torch_version", ["2.9.1+cu128", "2.9.1+cpu", None])
def test_a_cuda_12_extension_is_compared_only_with_a_cuda_torch(tmp_path, torch_version):
    """A cu12 torch: the same major; a CPU torch or none: nothing to compare with. No mismatch either way."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    if torch_version:
        _torch(site, version=torch_version, cuda="12.8" if "cu" in torch_version else None)
    _ext_needing(site, tmp_path / "cuda", ["libcudart.so.12"])
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC, system_root=str(_fake_root(tmp_path)))
    assert result["compatible"] is True and result["findings"] == [], result["findings"]
    assert result["files"][0]["cuda_major"] == 12


def test_a_cuda_13_library_beside_a_cu12_torch_is_the_mismatch_not_a_missing_library(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    _torch(site)
    names = ["libcudart.so.12", "libcublas.so.13", "libextra.so"]  # in DT_NEEDED order
    _cudart, cublas, extra = _ext_needing(site, tmp_path / "cuda", names)
    cublas.unlink()
    extra.unlink()
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC, system_root=str(_fake_root(tmp_path)))
    errors = [(f["kind"], f["detail"]) for f in result["findings"]]
    assert errors == [
        ("cuda_major_mismatch", "pkg/ext.so needs libcublas.so.13 (CUDA 13) but torch is 2.9.1+cu128 (CUDA 12.8); "
                                "libcublas.so.13 not found"),
        ("library_not_found", "pkg/ext.so needs libextra.so, which the loader cannot find")]
    assert result["files"][0]["cuda_major"] == [12, 13]


def test_a_file_without_cuda_libraries_has_no_cuda_major(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["files"][0]["cuda_major"] is None


# -- the system: a root tree or explicit directories ---------------------------------------------------------------

def test_system_libraries_come_from_system_root_or_the_directories_given(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    root = _fake_root(tmp_path)
    only = N.build_lib(root / "usr" / "lib" / "libonlyroot.so", "int r(void){return 1;}", soname="libonlyroot.so")
    N.build_lib(site / "pkg" / "ext.so", "int r(void); int f(void){return r();}", libs=[only])
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC, system_root=str(root))
    assert result["compatible"] is True, result["msg"]
    assert {"name": "libonlyroot.so", "path": str(only), "via": "system"} in result["files"][0]["needed"]
    assert result["system"]["source"] == "ld.so.conf" and result["system"]["library_dirs"] is None
    assert result["system"]["cache_error"].startswith("%s: " % (root / "etc" / "ld.so.cache"))
    # this host's own system does not have it
    host = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert "library_not_found" in _by_kind(host)
    # explicit directories: searched instead, and reported
    dirs = [str(root / "lib"), str(root / "usr" / "lib")]
    given = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC, system_library_dirs=dirs)
    assert given["compatible"] is True, given["msg"]
    assert given["system"] == {"source": "library_dirs", "library_dirs": dirs, "cache_error": None}


# -- which files of a package are checked ---------------------------------------------------------------------------

def test_files_a_record_lists_but_lacks_are_skipped_and_max_files_counts_them(tmp_path):
    """my-kernels (import name mykern, listed first of its two top-level names): RECORD lists mykern/aaa.so, which
    is not on disk; the check goes on with the next files, and ``max_files`` takes the first ones listed."""
    venv, site = _venv(tmp_path)
    di = _dist(site, "my-kernels", "1.0", files=["mykern/__init__.py", "mykern/aaa.so", "mykern/ops.so",
                                                 "mykern/zzz.so"])
    (di / "top_level.txt").write_text("mykern\nmykern_data\n")
    libs = [N.build_lib(site / "mykern" / n, "int f(void){return 0;}") for n in ("ops.so", "zzz.so")]
    (site / "mykern" / "__init__.py").write_text("")
    result = abi.check(str(venv), packages=["my-kernels"], gpu_ccs=CC)
    assert result["packages"]["my-kernels"] == {"import_name": "mykern", "distributions": ["my-kernels"],
                                                "files": 3}
    assert [f["path"] for f in result["files"]] == [str(p) for p in libs]
    assert _by_kind(result)["record_missing_file"]["detail"] == ("RECORD of my-kernels 1.0 lists 1 missing file "
                                                                 "(e.g. mykern/aaa.so)")
    limited = abi.check(str(venv), packages=["my-kernels"], gpu_ccs=CC, max_files=2)
    assert [f["path"] for f in limited["files"]] == [str(libs[0])]


def test_a_file_that_is_not_elf_is_to_be_reinstalled(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    (site / "pkg" / "ext.so").write_text("this is a text file, not a library\n")
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["not_elf"]
    assert (found["path"], found["fix"]) == ("pkg/ext.so", "reinstall the distribution that owns it")


def test_what_torchs_own_libraries_miss_is_reported(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    gone = N.build_lib(tmp_path / "build" / "libgone.so", "int g(void){return 1;}", soname="libgone.so")
    _torch(site, libs=[gone])
    gone.unlink()
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["torch_import"]["missing"] == ["torch/lib/libc10.so needs libgone.so"]


# -- the check as a process: its files closed, its duration ---------------------------------------------------------

def _open_files_under(path):
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/%s" % fd)
        except OSError:
            continue
        if target.startswith(str(path)):
            out.append(target)
    return out


def test_the_check_leaves_no_file_open_and_reports_its_duration(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    dep = N.build_lib(tmp_path / "build" / "libdep.so", "int dep(void){return 1;}", soname="libdep.so")
    N.build_lib(site / "pkg" / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep],
                rpath=str(dep.parent))
    for v in (venv, tmp_path / "no_venv"):
        t0 = time.monotonic()
        result = abi.check(str(v), packages=["pkg"], gpu_ccs=CC)
        wall = time.monotonic() - t0
        assert 0 <= result["elapsed"] <= wall + 0.001
    assert result["findings"][0]["kind"] == "venv_invalid"
    assert _open_files_under(tmp_path) == []


# -- the SM code of .nv_fatbin against the GPUs that load each file ---------------------------------------------------

def test_an_unreadable_fatbin_is_reported(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    asm = tmp_path / "bad_fatbin.S"  # a fatbin header claiming 4096 bytes in a 16-byte section
    asm.write_text('.section .nv_fatbin, "a"\n.balign 8\n.long 0xBA55ED50\n.short 1\n.short 16\n.quad 4096\n')
    obj = tmp_path / "bad_fatbin.o"
    N.run(["gcc", "-c", "-o", str(obj), str(asm)])
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}", extra_objects=[obj])
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert [(f["kind"], f["detail"]) for f in result["findings"]] == [
        ("corrupt_elf", "pkg/ext.so: .nv_fatbin unreadable (fatbin blob at section offset 0 claims 4096 bytes, "
                        "past the section end)")]


@pytest.mark.skipif(not N.have_nvcc(), reason="needs nvcc")
def test_sgl_kernel_libraries_are_checked_for_the_gpus_that_load_them(tmp_path):
    """On a 9.0 + 12.0 host with sm_90 code only: sm90/common_ops is loaded by the 9.0 GPU alone (fine);
    sm100/common_ops by the 12.0 one at import (an error); flash_ops lazily by both (a warning whose fix can be
    to leave its feature unused, unless a configured feature needs it)."""
    venv, site = _venv(tmp_path)
    (site / "sgl_kernel").mkdir()
    (site / "sgl_kernel" / "__init__.py").write_text("")
    sm90 = N.fatbin_object("sm90_only", [N.ARCHS["sm_90"]])
    for rel in ("sm90/common_ops.abi3.so", "sm100/common_ops.abi3.so", "flash_ops.abi3.so"):
        N.build_lib(site / "sgl_kernel" / rel, "int f(void){return 0;}", extra_objects=[sm90])
    ccs = [(9, 0), (12, 0)]

    def gaps(features=()):
        result = abi.check(str(venv), packages=["sgl_kernel"], gpu_ccs=ccs, features=features)
        assert [f["archs"] for f in result["files"]] == [["sm_90"]] * 3
        return sorted((f["path"], f["compute_capability"], f["severity"], f["fix"]) for f in result["findings"]
                      if f["kind"] == "no_gpu_code")

    assert gaps() == [
        ("sgl_kernel/flash_ops.abi3.so", "12.0", "warning", "install a build with sm_120 code, or keep the feature "
                                                            "that loads it unused (e.g. another attention backend)"),
        ("sgl_kernel/sm100/common_ops.abi3.so", "12.0", "error", "install a build with sm_120 code")]
    assert gaps(["fa3"])[0] == ("sgl_kernel/flash_ops.abi3.so", "12.0", "error", "install a build with sm_120 code")


def test_a_symbol_the_extension_exports_itself_does_not_stand_in_for_one_it_needs_elsewhere(tmp_path):
    """ext.so exports foo@@EXT_2 and needs foo@DEP_1.0 of libdep.so, which no longer has foo: the loader refuses it
    ("undefined symbol: foo, version DEP_1.0"); the extension's own foo does not count."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    dep = N.build_lib(tmp_path / "build" / "libdep.so", "int foo(void){return 1;}", soname="libdep.so",
                      version_script="DEP_1.0 { global: foo; local: *; };\n")
    N.build_lib(site / "pkg" / "ext.so", 'int foo_old(void);\n__asm__(".symver foo_old,foo@DEP_1.0");\n'
                "int foo(void){return 2;}\nint f(void){return foo_old();}\n", libs=[dep], rpath=str(dep.parent),
                version_script="EXT_2 { global: foo; f; local: *; };\n")
    N.build_lib(dep, "int bar(void){return 1;}", soname="libdep.so",
                version_script="DEP_1.0 { global: bar; local: *; };\n")
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["undefined_symbol"]
    assert (found["symbols"], found["count"]) == (["foo"], 1)
