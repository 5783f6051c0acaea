"""abicheck/dependencies.py: DT_NEEDED as it resolved, and what each name the loader cannot find means."""
from __future__ import annotations

import abi_native as N
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import dependencies as D
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldresolve import Resolver

SITE = "/venv/lib/python3.11/site-packages"
EXT = SITE + "/pkg/ext.so"


def _miss(name, requester=EXT, searched=("/a", "/b")):
    return {"requester": requester, "name": name, "searched": list(searched)}


def _deps(missing=(), errors=(), direct=()):
    closure = {"objects": [EXT], "needed": {}, "missing": list(missing), "errors": list(errors)}
    return D.Dependencies(closure, tuple(direct))


def test_the_driver_torch_and_any_other_library():
    driver = D.missing_library(_miss("libcuda.so.1"), EXT, "pkg/ext.so", SITE, None)
    assert driver.kind == "driver_missing"
    assert driver.detail == "pkg/ext.so needs libcuda.so.1, the NVIDIA driver's library, which is not found"
    assert driver.fix.startswith("install the NVIDIA driver (in a container: expose the driver libraries)")
    torch = D.missing_library(_miss("libc10.so"), EXT, "pkg/ext.so", SITE, None)
    assert (torch.kind, torch.detail) == ("torch_missing", "pkg/ext.so needs libc10.so but torch is not installed "
                                                           "in the venv")
    with_torch = D.missing_library(_miss("libc10.so"), EXT, "pkg/ext.so", SITE, {"version": "2.11.0"})
    assert with_torch.kind == "library_not_found"  # torch is there: its library is simply not found
    other = D.missing_library(_miss("libgone.so", searched=["/d%d" % i for i in range(20)]), EXT, "pkg/ext.so",
                              SITE, None)
    assert other.detail == "pkg/ext.so needs libgone.so, which the loader cannot find"
    assert dict(other.extra)["searched"] == ["/d%d" % i for i in range(12)]


def test_a_name_missing_further_down_names_its_requester():
    found = D.missing_library(_miss("libgone.so", requester=SITE + "/pkg/libmid.so"), EXT, "pkg/ext.so", SITE, None)
    assert found.detail == "pkg/ext.so needs libgone.so, which the loader cannot find (needed by pkg/libmid.so)"
    driver = D.missing_library(_miss("libcuda.so.1", requester="/usr/lib/libx.so"), EXT, "pkg/ext.so", SITE, None)
    assert driver.detail.endswith("which is not found (needed by /usr/lib/libx.so)")


def test_names_the_cuda_major_explains_are_left_out_only_for_the_file_itself():
    deps = _deps(missing=[_miss("libcudart.so.13"), _miss("libcudart.so.13", requester=SITE + "/pkg/libmid.so"),
                          _miss("libextra.so")])
    problems = D.missing_libraries(deps, EXT, "pkg/ext.so", SITE, None, frozenset(["libcudart.so.13"]))
    assert [p.detail for p in problems] == [
        "pkg/ext.so needs libcudart.so.13, which the loader cannot find (needed by pkg/libmid.so)",
        "pkg/ext.so needs libextra.so, which the loader cannot find"]
    assert len(D.missing_libraries(deps, EXT, "pkg/ext.so", SITE, None)) == 3


def test_unreadable_dependencies_but_not_the_file_itself():
    deps = _deps(errors=[ElfError("not_elf", EXT, "no ELF magic"),
                         ElfError("corrupt_elf", SITE + "/pkg/libdep.so", "truncated")])
    problems = D.missing_libraries(deps, EXT, "pkg/ext.so", SITE, None)
    assert [(p.kind, p.detail, p.fix) for p in problems] == [
        ("dependency_unreadable", "pkg/ext.so: dependency pkg/libdep.so: truncated",
         "reinstall the distribution that owns it")]


def test_resolved_report_and_incomplete():
    direct = [D.Needed("liba.so", "/l/liba.so", "rpath"), D.Needed("libb.so", None, None)]
    deps = _deps(direct=direct)
    assert deps.resolved() == {"liba.so": "/l/liba.so"}
    assert deps.report() == [{"name": "liba.so", "path": "/l/liba.so", "via": "rpath"},
                             {"name": "libb.so", "path": None, "via": None}]
    assert deps.incomplete is False
    assert _deps(missing=[_miss("x")]).incomplete is True
    assert _deps(errors=[ElfError("not_elf", "/x", "no")]).incomplete is True


def test_resolve_dependencies_on_real_files(tmp_path):
    dep = N.build_lib(tmp_path / "lib" / "libdep.so", "int d(void){return 1;}", soname="libdep.so")
    gone = N.build_lib(tmp_path / "lib" / "libgone.so", "int g(void){return 1;}", soname="libgone.so")
    ext = N.build_lib(tmp_path / "ext.so", "int d(void); int g(void); int f(void){return d() + g();}",
                      libs=[dep, gone], rpath=str(dep.parent))
    gone.unlink()
    resolver = Resolver(SystemLibraries("/", None))
    deps = D.resolve_dependencies(resolver, str(ext))
    assert D.Needed("libdep.so", str(dep), "rpath") in deps.direct
    assert D.Needed("libgone.so", None, None) in deps.direct
    assert deps.objects[:2] == [str(ext), str(dep)] and deps.incomplete
    assert resolver.loaded_paths == []  # nothing committed to the process
