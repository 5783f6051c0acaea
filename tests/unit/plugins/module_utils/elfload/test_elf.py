"""elfload/elf.py readings, cross-checked against pyelftools on the same files; bad input gives ElfError only."""
from __future__ import annotations

import random
import subprocess

import abi_native as N
import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError, ElfFile, gnu_hash, read_summary
from elf_oracle import read_dynamic_tags
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection
from elftools.elf.sections import SymbolTableSection

DEP_SRC = """
int dep_v1(void) { return 1; }
int dep_v2(void) { return 2; }
int dep_plain(void) { return 3; }
"""
DEP_MAP = """
DEPV_1.0 { global: dep_v1; local: *; };
DEPV_2.0 { global: dep_v2; dep_plain; } DEPV_1.0;
"""
EXT_SRC = r"""
#include <math.h>
#include <stdio.h>
int dep_v1(void); int dep_v2(void);
void _ZN3c1010fixturefunEv(void);
__attribute__((weak)) void weak_optional(void);
double ext_entry(double x) {
    if (weak_optional) weak_optional();
    _ZN3c1010fixturefunEv();
    printf("%d\n", dep_v1() + dep_v2());
    return sqrt(x);
}
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("elf")
    dep = N.build_lib(d / "deps" / "libdep.so.1", DEP_SRC, soname="libdep.so.1", version_script=DEP_MAP)
    objs = [N.fatbin_object("elf_ext", [N.ARCHS["sm_80"], N.ARCHS["sm_90a"]])] if N.have_nvcc() else []
    ext = N.build_lib(d / "pkg" / "ext.so", EXT_SRC, libs=[dep, "-lm"], rpath="$ORIGIN/../deps",
                      extra_objects=objs, extra=["-Wl,--allow-shlib-undefined"])
    ext_rp = N.build_lib(d / "pkg" / "ext_runpath.so", EXT_SRC, soname="libextrp.so", libs=[dep, "-lm"],
                         rpath="$ORIGIN/a:/opt/b", runpath=True)
    return {"dep": dep, "ext": ext, "ext_rp": ext_rp, "dir": d}


def _pyelf(path):
    out = {"needed": [], "rpath": None, "runpath": None, "soname": None, "defined": set(), "undefined": set(),
           "verneed": {}, "verdef": set(), "sections": {}}
    with open(path, "rb") as fh:
        e = ELFFile(fh)
        for sec in e.iter_sections():
            if sec.name:
                out["sections"][sec.name] = (sec["sh_offset"], sec["sh_size"])
            if isinstance(sec, DynamicSection):
                read_dynamic_tags(sec, out)
            elif isinstance(sec, SymbolTableSection) and sec.name == ".dynsym":
                for sym in list(sec.iter_symbols())[1:]:
                    if not sym.name:
                        continue
                    bind = sym["st_info"]["bind"]
                    if sym["st_shndx"] == "SHN_UNDEF":
                        if bind != "STB_WEAK":
                            out["undefined"].add(sym.name)
                    elif bind in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE", "STB_LOOS"):  # 10 is STB_LOOS there
                        out["defined"].add(sym.name)
            elif isinstance(sec, GNUVerNeedSection):
                for vn, auxes in sec.iter_versions():
                    out["verneed"][vn.name] = [a.name for a in auxes]
            elif isinstance(sec, GNUVerDefSection):
                for vd, auxes in sec.iter_versions():
                    if not vd["vd_flags"] & 1:
                        out["verdef"].add(next(iter(auxes)).name)
    return out


def _ours(path):
    with ElfFile(path) as e:
        dyn = e.dynamic()
        return {
            "needed": dyn["needed"], "rpath": dyn["rpath"], "runpath": dyn["runpath"], "soname": dyn["soname"],
            "defined": e.defined_symbols(), "undefined": set(e.undefined_symbols()),
            "verneed": e.version_needs(), "verdef": e.version_defs(),
            "sections": dict((s.name, (s.offset, s.size)) for s in e.sections if s.name),
        }


def _system_lib(name):
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(name + " ") and "x86-64" in line:
            return line.split("=>")[-1].strip()
    pytest.skip("%s not in the ld.so cache" % name)


@pytest.mark.parametrize("which", ["dep", "ext", "ext_rp", "libstdc++.so.6", "libc.so.6"])
def test_readings_match_pyelftools(libs, which):
    path = libs[which] if which in libs else _system_lib(which)
    ours, ref = _ours(path), _pyelf(path)
    for key in ("needed", "rpath", "runpath", "soname", "defined", "undefined", "verneed", "verdef", "sections"):
        assert ours[key] == ref[key], key


def test_extension_facts(libs):
    s = read_summary(str(libs["ext"]))
    assert s["needed"][:1] == ["libdep.so.1"] and "libm.so.6" in s["needed"]
    assert s["rpath"] == "$ORIGIN/../deps" and s["runpath"] is None
    assert set(s["version_needs"]["libdep.so.1"]) == {"DEPV_1.0", "DEPV_2.0"}
    assert any(v.startswith("GLIBC_") for v in s["version_needs"]["libc.so.6"])
    with ElfFile(str(libs["ext"])) as e:
        assert "_ZN3c1010fixturefunEv" in e.undefined_symbols()
        assert "weak_optional" not in e.undefined_symbols()
        assert "weak_optional" in e.undefined_symbols(include_weak=True)
    rp = read_summary(str(libs["ext_rp"]))
    assert rp["runpath"] == "$ORIGIN/a:/opt/b" and rp["rpath"] is None and rp["soname"] == "libextrp.so"
    assert ElfFile(str(libs["dep"])).version_defs() == {"DEPV_1.0", "DEPV_2.0"}


@pytest.mark.skipif(not N.have_nvcc(), reason="nvcc not installed")
def test_nv_fatbin_section_located(libs):
    with ElfFile(str(libs["ext"])) as e:
        off, size = e.section_range(".nv_fatbin")
        assert e.mm[off:off + 4] == b"\x50\xed\x55\xba"
        assert (off, size) == _pyelf(libs["ext"])["sections"][".nv_fatbin"]


def test_gnu_hash_lookup_matches_full_symbol_table():
    path = _system_lib("libstdc++.so.6")
    with ElfFile(path) as e:
        assert e.has_gnu_hash()
        defined = sorted(e.defined_symbols())
        rng = random.Random(7)
        sample = rng.sample(defined, min(400, len(defined)))
        fakes = [n + "_not_there" for n in sample[:100]] + ["_ZN3c105helloEv", ""]
        undefined = list(e.undefined_symbols())[:50]
        found = e.lookup_defined(sample + fakes + undefined)
        assert found == set(sample)


def test_gnu_hash_function():
    # values from the GNU hash definition (dl_new_hash)
    assert gnu_hash(b"") == 5381
    assert gnu_hash(b"printf") == 0x156B2BB8
    assert gnu_hash(b"exit") == 0x7C967E3F


@pytest.mark.parametrize("content,kind", [
    (b"", "not_elf"),
    (b"not an elf at all, just text named .so\n", "not_elf"),
    (b"\x7fELF" + b"\x09\x09" + b"\0" * 58, "corrupt_elf"),
])
def test_bad_files(tmp_path, content, kind):
    p = tmp_path / "bad.so"
    p.write_bytes(content)
    with pytest.raises(ElfError) as info:
        read_summary(str(p))
    assert info.value.kind == kind
    assert str(p) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ElfError) as info:
        read_summary(str(tmp_path / "nope.so"))
    assert info.value.kind == "unreadable"


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.6, 0.95])
def test_truncated(libs, tmp_path, fraction):
    data = libs["ext"].read_bytes()
    p = tmp_path / "trunc.so"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ElfError) as info:
        read_summary(str(p))
    assert info.value.kind == "corrupt_elf"
    assert "truncated" in info.value.detail


def test_random_corruption_never_escapes_as_other_exceptions(libs, tmp_path):
    data = bytearray(libs["ext"].read_bytes())
    rng = random.Random(1234)
    p = tmp_path / "fuzz.so"
    for _round in range(150):
        buf = bytearray(data)
        for _j in range(rng.randint(1, 40)):
            pos = rng.randrange(len(buf))
            buf[pos] = rng.randrange(256)
        p.write_bytes(bytes(buf))
        try:
            with ElfFile(str(p)) as e:
                e.dynamic()
                e.undefined_symbols()
                e.defined_symbols()
                e.version_needs()
                e.version_defs()
                e.lookup_defined(["dep_v1", "_ZN3c1010fixturefunEv"])
        except ElfError as exc:
            assert exc.kind in ("corrupt_elf", "not_elf")


def test_unreadable_as_unprivileged_user(libs, tmp_path):
    target = tmp_path / "secret.so"
    target.write_bytes(libs["dep"].read_bytes())
    target.chmod(0o600)
    tmp_path.chmod(0o755)
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError, read_summary\n"
            "try:\n    read_summary(%r)\nexcept ElfError as e:\n    print(e.kind, e.detail)\n") % (
                str(N.COLLECTIONS), str(target))
    if N.python_as_nobody_fails():
        pytest.skip(N.python_as_nobody_fails())
    res = N.as_nobody([N.nobody_python(), "-c", code])
    if res.returncode != 0 and "setpriv" in res.stderr:
        pytest.skip("setpriv not usable here: %s" % res.stderr)
    assert res.stdout.startswith("unreadable Permission denied"), res.stdout + res.stderr
