"""ldresolve's model of ``import torch`` that the cosmic-ray run of elfload/ldresolve.py found unguarded (issue 14).

torch preloads the CUDA libraries of the nvidia-* wheels, in the order of the list in its __init__.py,
when its own libraries fail to load (and, torch >= 2.6, always once libcudart is loaded), stopping at
the first one that is absent. abi_check decides "which libcudart will the extension get" from this.
"""
from __future__ import annotations

from pathlib import Path

import abi_native as N
from ansible_collections.dflash.deploy.plugins.module_utils.elfload import ldresolve as L
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries

ALWAYS = 'if "libcudart.so" not in _maps:\n    _preload_cuda_deps()\n'


def _init(torch_dir: Path, pairs, extra=""):
    torch_dir.mkdir(parents=True, exist_ok=True)
    body = "cuda_libs = {\n%s}\n" % "".join("    (%r, %r),\n" % p for p in pairs)
    (torch_dir / "__init__.py").write_text(body + extra)


def test_preload_plan_read_from_torch(tmp_path):
    torch = tmp_path / "torch"
    assert L.torch_preload_plan(str(torch)) == (list(L.DEFAULT_TORCH_PRELOADS), False)  # no __init__.py
    _init(torch, [("cublas", "libcublas.so.*[0-9]"), ("plain", "libplain.so.1"), ("q", "libq.so.?")])
    assert L.torch_preload_plan(str(torch)) == ([("cublas", "libcublas.so.*[0-9]"), ("q", "libq.so.?")], False)
    _init(torch, [("cublas", "libcublas.so.*[0-9]")], ALWAYS)
    assert L.torch_preload_plan(str(torch))[1] is True
    _init(torch, [("cublas", "libcublas.so.*[0-9]")], ALWAYS.replace('"', "'"))
    assert L.torch_preload_plan(str(torch))[1] is True
    _init(torch, [("plain", "libplain.so.1")])  # no pattern at all: torch's known list
    assert L.torch_preload_plan(str(torch)) == (list(L.DEFAULT_TORCH_PRELOADS), False)


def test_preload_plan_reads_an_init_of_up_to_16_mib(tmp_path):
    torch = tmp_path / "torch"
    _init(torch, [("cublas", "libcublas.so.*[0-9]")])
    init = torch / "__init__.py"
    text = init.read_bytes()
    init.write_bytes(text + b"#" * ((16 << 20) - len(text) - 1) + b"\n")
    assert init.stat().st_size == 16 << 20
    assert L.torch_preload_plan(str(torch))[0] == [("cublas", "libcublas.so.*[0-9]")]
    with open(init, "ab") as handle:
        handle.write(b"\n")
    assert L.torch_preload_plan(str(torch)) == (list(L.DEFAULT_TORCH_PRELOADS), False)  # refused, not cut


def test_preload_candidates_in_torchs_order(tmp_path):
    site = tmp_path / "site"
    for d in ("nvidia/cublas/lib", "nvidia/cu13/lib", "cublas/lib"):
        (site / d).mkdir(parents=True)
    for rel in ("nvidia/cublas/lib/libcublas.so.13", "nvidia/cublas/lib/libcublas.so.12",
                "nvidia/cu13/lib/libcublas.so.13", "cublas/lib/libcublas.so.13"):
        (site / rel).write_bytes(b"")
    got = L._preload_candidates(str(site), "cublas", "libcublas.so.*[0-9]", 13)
    assert [Path(p).relative_to(site).as_posix() for p in got] == [
        "nvidia/cublas/lib/libcublas.so.12", "nvidia/cublas/lib/libcublas.so.13",
        "nvidia/cu13/lib/libcublas.so.13", "cublas/lib/libcublas.so.13"]
    assert len(L._preload_candidates(str(site), "cublas", "libcublas.so.*[0-9]", None)) == 3


def _lib(path: Path, soname: str) -> Path:
    return N.build_lib(path, "int %s_f(void){return 0;}" % soname.split(".")[0], soname=soname)


def _resolver():
    return L.Resolver(SystemLibraries("/", None), [])  # this host's libc and loader cache


def test_failed_torch_load_preloads_the_first_candidate_of_each(tmp_path):
    site = tmp_path / "site"
    torch = site / "torch"
    fakert = _lib(tmp_path / "b" / "libfakert.so.7", "libfakert.so.7")  # on no host: the load fails
    N.build_lib(torch / "lib" / "libtorch_global_deps.so", "int g(void){return 0;}", libs=[fakert],
                extra_objects=["-Wl,--no-as-needed"])
    _init(torch, [("fake_runtime", "libfakert.so.*[0-9]"), ("nccl", "libnccl.so.*[0-9]")])
    first = _lib(site / "nvidia" / "fake_runtime" / "lib" / "libfakert.so.7", "libfakert.so.7")
    _lib(site / "nvidia" / "fake_runtime" / "lib" / "libfakert.so.8", "libfakert.so.8")
    resolver = _resolver()
    report = L.simulate_torch_import(resolver, str(torch), str(site), 13)
    assert report["preloaded"] == [str(first)]  # the first candidate; nccl has none and is skipped
    assert report["missing"] == []  # the retry finds the preloaded library
    assert resolver.loaded["libfakert.so.7"] == str(first)
    assert str(first) in resolver.loaded_paths


def test_newer_torch_preloads_in_order_until_one_is_absent(tmp_path):
    site = tmp_path / "site"
    torch = site / "torch"
    own = _lib(torch / "lib" / "libcudart.so.13", "libcudart.so.13")  # found through torch's RPATH
    N.build_lib(torch / "lib" / "libtorch_global_deps.so", "int g(void){return 0;}", libs=[own], rpath="$ORIGIN",
                extra_objects=["-Wl,--no-as-needed"])
    pairs = [("cublas", "libcublas.so.*[0-9]"), ("nccl", "libnccl.so.*[0-9]"), ("cufft", "libcufft.so.*[0-9]")]
    _init(torch, pairs)
    cublas = _lib(site / "nvidia" / "cublas" / "lib" / "libcublas.so.13", "libcublas.so.13")
    _lib(site / "nvidia" / "cufft" / "lib" / "libcufft.so.12", "libcufft.so.12")
    report = L.simulate_torch_import(_resolver(), str(torch), str(site), 13)
    assert report["preloaded"] == []  # loaded fine, and this torch does not preload then
    _init(torch, pairs, ALWAYS)
    resolver = _resolver()
    report = L.simulate_torch_import(resolver, str(torch), str(site), 13)
    assert report["preloaded"] == [str(cublas)]  # stops at nccl, which is absent: cufft is never reached
    assert report["missing"] == [] and resolver.loaded["libcudart.so.13"] == str(own)


def test_a_needed_entry_with_origin_is_found_beside_its_requester(tmp_path):
    pkg = tmp_path / "site" / "pkg"
    dep = N.build_lib(pkg / "libdep.so", "int dep(void){return 1;}", soname="$ORIGIN/libdep.so")
    ext = N.build_lib(pkg / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep])
    result = _resolver().closure(str(ext))
    found = [d["path"] for d in result["needed"][str(ext)] if d["name"] == "$ORIGIN/libdep.so"]
    assert result["missing"] == [] and found == [str(dep)]


def test_lib_token_names_the_64_bit_directory_on_64_bit_machines():
    assert L.expand_tokens("/opt/$LIB/x", "/o", "x86_64") == "/opt/lib64/x"
    assert L.expand_tokens("/opt/${LIB}", "/o", "aarch64") == "/opt/lib64"
    assert L.expand_tokens("/opt/$LIB", "/o", "arm") == "/opt/lib"


KEEP = ["-Wl,--no-as-needed"]  # every library linked stays a DT_NEEDED entry, in link order


def _needing(path: Path, libs, soname=None, rpath=None) -> Path:
    return N.build_lib(path, "int %s_g(void){return 0;}" % path.name.split(".")[0], soname=soname, libs=libs,
                       rpath=rpath, extra_objects=KEEP)


def _under(paths, top: Path):
    return [Path(p).relative_to(top).as_posix() for p in paths if Path(p).is_relative_to(top)]


def test_closure_goes_on_past_a_missing_or_unreadable_dependency_and_follows_each_found_one(tmp_path):
    b = tmp_path / "b"
    gone, bad, deep = (_lib(b / n, n) for n in ("libgone.so", "libbad.so", "libdeep.so"))
    mid = _needing(b / "libmid.so", [deep], soname="libmid.so", rpath="$ORIGIN")
    ext = _needing(tmp_path / "pkg" / "ext.so", [gone, bad, mid], rpath=str(b))
    gone.unlink()
    bad.write_bytes(b"\x7fELF" + b"\0" * 60)
    result = _resolver().closure(str(ext))
    assert _under(result["objects"], tmp_path) == ["pkg/ext.so", "b/libmid.so", "b/libdeep.so"]
    assert [(m["requester"], m["name"]) for m in result["missing"]] == [(str(ext), "libgone.so")]
    assert [e.path for e in result["errors"]] == [str(bad)]


def test_closure_goes_on_past_a_dependency_already_loaded(tmp_path):
    b = tmp_path / "b"
    libb, libx = _lib(b / "libb.so", "libb.so"), _lib(b / "libx.so", "libx.so")
    liba = _needing(b / "liba.so", [libb, libx], soname="liba.so", rpath="$ORIGIN")
    ext = _needing(tmp_path / "pkg" / "ext.so", [liba, libb], rpath=str(b))
    result = _resolver().closure(str(ext))
    assert _under(result["objects"], tmp_path) == ["pkg/ext.so", "b/liba.so", "b/libb.so", "b/libx.so"]
    assert result["missing"] == []


def test_closure_loads_breadth_first_and_commits_only_when_asked(tmp_path):
    """ext needs liba and libb; each finds a libshared.so of its own through its RPATH. ld.so loads breadth first:
    liba's is loaded first, and libb gets that one (already loaded under its SONAME)."""
    b = tmp_path / "b"
    shared_a = _lib(b / "a_only" / "libshared.so", "libshared.so")
    shared_b = _lib(b / "b_only" / "libshared.so", "libshared.so")
    liba = _needing(b / "liba.so", [shared_a], soname="liba.so", rpath="$ORIGIN/a_only")
    libb = _needing(b / "libb.so", [shared_b], soname="libb.so", rpath="$ORIGIN/b_only")
    ext = _needing(tmp_path / "pkg" / "ext.so", [liba, libb], rpath=str(b))
    resolver = _resolver()
    result = resolver.closure(str(ext))
    got = {d["name"]: d["path"] for d in result["needed"][str(libb)]}
    assert got["libshared.so"] == str(shared_a)
    assert resolver.loaded == {} and resolver.loaded_paths == []  # looked at, not loaded into the process
    resolver.closure(str(ext), commit=True)
    assert resolver.loaded["libshared.so"] == str(shared_a) and str(ext) in resolver.loaded_paths


def test_after_a_failed_load_torch_preloads_fresh_copies_with_their_dependencies(tmp_path):
    """torch's own library finds libfakeblas.so.7 through its RPATH but not libfakert.so.7: the load fails, nothing
    of it stays in the process, and torch preloads the nvidia-* copies (each with what it needs) before retrying.
    A damaged candidate does not stop the others."""
    site = tmp_path / "site"
    torch = site / "torch"
    b = tmp_path / "b"
    elsewhere = _lib(b / "elsewhere" / "libfakeblas.so.7", "libfakeblas.so.7")
    fakert = _lib(b / "libfakert.so.7", "libfakert.so.7")
    _needing(torch / "lib" / "libtorch_global_deps.so", [elsewhere, fakert], rpath=str(b / "elsewhere"))
    _init(torch, [("fake_blas", "libfakeblas.so.*[0-9]"), ("fake_runtime", "libfakert.so.*[0-9]"),
                  ("fake_nccl", "libfakenccl.so.*[0-9]")])
    nv = site / "nvidia"
    blas = _lib(nv / "fake_blas" / "lib" / "libfakeblas.so.7", "libfakeblas.so.7")
    dep = _lib(nv / "fake_runtime" / "lib" / "libfakedep.so.7", "libfakedep.so.7")
    runtime = _needing(nv / "fake_runtime" / "lib" / "libfakert.so.7", [dep], soname="libfakert.so.7",
                       rpath="$ORIGIN")
    damaged = nv / "fake_nccl" / "lib" / "libfakenccl.so.2"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not a library, but named like one\n")
    resolver = _resolver()
    report = L.simulate_torch_import(resolver, str(torch), str(site), 12)
    assert report["preloaded"] == [str(blas), str(runtime), str(damaged)]
    assert report["missing"] == []
    assert resolver.loaded["libfakeblas.so.7"] == str(blas)  # not the copy of the failed load
    assert resolver.loaded["libfakedep.so.7"] == str(dep) and str(dep) in resolver.loaded_paths


def test_newer_torch_preloads_from_the_first_folder_it_searches(tmp_path):
    site = tmp_path / "site"
    torch = site / "torch"
    own = _lib(torch / "lib" / "libcudart.so.13", "libcudart.so.13")
    _needing(torch / "lib" / "libtorch_global_deps.so", [own], rpath="$ORIGIN")
    _init(torch, [("cublas", "libcublas.so.*[0-9]")], ALWAYS)
    first = _lib(site / "nvidia" / "cublas" / "lib" / "libcublas.so.13", "libcublas.so.13")
    _lib(site / "nvidia" / "cu13" / "lib" / "libcublas.so.13", "libcublas.so.13")
    report = L.simulate_torch_import(_resolver(), str(torch), str(site), 13)
    assert report["preloaded"] == [str(first)]


def test_a_library_loaded_under_another_name_is_found_by_its_soname(tmp_path):
    """ext needs libalias.so, a file whose SONAME is libreal.so.1, and libother.so, which needs libreal.so.1 and has
    no path to it: ld.so matches the loaded object's SONAME, so libother gets libalias.so."""
    b, stub = tmp_path / "b", tmp_path / "stub"
    alias = _lib(b / "libalias.so", "libalias.so")
    real = _lib(stub / "libreal.so.1", "libreal.so.1")
    other = _needing(b / "libother.so", [real], soname="libother.so")
    ext = _needing(tmp_path / "pkg" / "ext.so", [alias, other], rpath=str(b))
    _lib(alias, "libreal.so.1")
    real.unlink()
    result = _resolver().closure(str(ext))
    assert result["missing"] == []
    assert {d["name"]: d["path"] for d in result["needed"][str(other)]}["libreal.so.1"] == str(alias)
