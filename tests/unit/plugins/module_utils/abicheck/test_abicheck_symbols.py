"""abicheck/symbols.py: the load scope, the lookup in it, and what a missing symbol means."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import symbols as S
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.dependencies import Dependencies, Needed
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError

SITE = "/site"
EXT = "/site/pkg/ext.so"
TORCH = {"version": "2.9.1+cu128"}


class _Handle:
    def __init__(self, exports=(), has_sections=True, broken=False):
        self.exports = set(exports)
        self.has_sections = has_sections
        self.broken = broken

    def lookup_defined(self, names):
        if self.broken:
            raise ElfError("corrupt_elf", "/x", "bad hash table")
        return set(names) & self.exports


class _Resolver:
    loaded_paths = ["/site/torch/lib/libc10.so"]


class _Process:
    def __init__(self, objects, interpreter=("/usr/bin/python3.11",), torch=None):
        self.objects = objects
        self.interpreter = list(interpreter)
        self.torch = torch
        self.site = SITE
        self.resolver = _Resolver()
        self.opened = []

    def interpreter_objects(self):
        return self.interpreter

    def open(self, path):
        self.opened.append(path)
        if path not in self.objects:
            raise ElfError("unreadable", path, "No such file or directory")
        return self.objects[path]


class _Elf:
    def __init__(self, undefined=None):
        self.undefined = undefined

    def undefined_symbols(self):
        if self.undefined is None:
            raise ElfError("corrupt_elf", EXT, "malformed .dynsym")
        return list(self.undefined)


def _deps(objects=(EXT,), missing=(), direct=()):
    return Dependencies({"objects": list(objects), "needed": {}, "missing": list(missing), "errors": []},
                        tuple(direct))


def test_torch_symbols_are_the_c10_at_torch_caffe2_namespaces():
    for name in ("_ZN3c104warnERKSs", "_ZNK2at6Tensor4sizeEl", "_ZN5torch3jit4loadEv", "_ZTVN3c1011StorageImplE",
                 "_ZN6caffe28TypeMetaE"):
        assert S.is_torch_symbol(name), name
    for name in ("cuInit", "_ZNSt6vectorIiE", "PyLong_FromLong", "_ZN4c10x1fEv"):
        assert not S.is_torch_symbol(name), name


def test_load_scope_is_interpreter_then_torch_then_the_closure_without_the_file():
    scope = S.load_scope(["/py", "/libpython.so"], ["/torch/libc10.so", "/py"], [EXT, "/dep.so", "/torch/libc10.so"],
                         EXT)
    assert scope == ["/py", "/libpython.so", "/torch/libc10.so", "/dep.so"]


def test_look_up_stops_when_nothing_is_left_and_skips_what_it_cannot_read():
    process = _Process({"/a.so": _Handle(["x"]), "/b.so": _Handle(broken=True), "/c.so": _Handle(["y"]),
                        "/d.so": _Handle(["z"])})
    found = S.look_up(process, ["/a.so", "/gone.so", "/b.so", "/c.so", "/d.so"], ["x", "y"])
    assert (found.remaining, found.blind) == (frozenset(), ())
    assert process.opened == ["/a.so", "/gone.so", "/b.so", "/c.so"]  # /d.so: nothing left to look up


def test_without_an_interpreter_pythons_own_symbols_count_as_present():
    process = _Process({}, interpreter=())
    assert S.look_up(process, [], ["PyLong_FromLong", "_Py_NoneStruct", "nowhere"]).remaining == frozenset(["nowhere"])
    process = _Process({}, interpreter=("/py",))
    assert len(S.look_up(process, [], ["PyLong_FromLong", "nowhere"]).remaining) == 2


def test_objects_without_section_headers_are_blind():
    process = _Process({"/blind.so": _Handle(["x"], has_sections=False), "/a.so": _Handle(["y"])})
    found = S.look_up(process, ["/blind.so", "/a.so"], ["x", "y"])
    assert (found.remaining, found.blind) == (frozenset(["x"]), ("/blind.so",))


def test_missing_torch_symbols_sample_five_and_hint_the_old_abi():
    names = ["_ZN3c10%dEv" % i for i in range(6)] + ["_ZN3c104warnERKSs"]
    found = S.torch_symbols_missing("pkg/ext.so", names, TORCH, "pkg")
    assert found.detail == ("pkg/ext.so needs 7 c10/at/torch symbols that torch 2.9.1+cu128 does not export "
                            "(e.g. _ZN3c100Ev); old C++ ABI (std::string as Ss)")
    assert dict(found.extra) == {"symbols": names[:5], "count": 7}
    one = S.torch_symbols_missing("pkg/ext.so", ["_ZN3c101fEv"], TORCH, "pkg")
    assert "needs 1 c10/at/torch symbol that" in one.detail and "old C++ ABI" not in one.detail


def test_other_symbols_blame_the_driver_only_for_driver_calls_with_libcuda_found():
    assert S.other_symbols_missing("e.so", ["cuNew"], "/drv/libcuda.so.1").fix.startswith(
        "the NVIDIA driver's libcuda.so.1 (/drv/libcuda.so.1) is older")
    for names, driver in ((["cuNew"], None), (["cuNew", "other"], "/drv/libcuda.so.1")):
        assert S.other_symbols_missing("e.so", names, driver).fix.startswith("a dependency is older")


def test_undefined_symbols_counts_and_problems():
    process = _Process({"/site/torch/lib/libc10.so": _Handle(["_ZN3c104realEv"])}, torch=TORCH)
    elf = _Elf(["_ZN3c104realEv", "_ZN3c104missEv", "nowhere"])
    result = S.undefined_symbols(process, elf, EXT, "pkg/ext.so", _deps(), "pkg")
    assert result.report() == {"torch_symbols_needed": 2, "symbols_needed": 3, "torch_symbols_missing": 1,
                               "symbols_missing": 2}
    assert [(p.kind, dict(p.extra)["symbols"]) for p in result.problems] == [
        ("undefined_symbol", ["_ZN3c104missEv"]), ("undefined_symbol", ["nowhere"])]


def test_a_missing_library_explains_the_other_symbols_but_not_torchs():
    process = _Process({}, torch=TORCH)
    deps = _deps(missing=[{"requester": EXT, "name": "libgone.so", "searched": []}])
    result = S.undefined_symbols(process, _Elf(["_ZN3c104missEv", "nowhere"]), EXT, "pkg/ext.so", deps, "pkg")
    assert [dict(p.extra)["symbols"] for p in result.problems] == [["_ZN3c104missEv"]]
    assert result.missing == 2


def test_without_torch_its_symbols_are_not_counted_as_torchs():
    result = S.undefined_symbols(_Process({}), _Elf(["_ZN3c104realEv"]), EXT, "pkg/ext.so", _deps(), "pkg")
    assert (result.torch_missing, result.missing) == (None, 1)
    assert result.problems == ()  # counted as missing, but reported by the libtorch/libc10 that is not found


def test_blind_objects_turn_the_rest_into_an_info():
    process = _Process({"/site/dep.so": _Handle(has_sections=False)})
    result = S.undefined_symbols(process, _Elf(["a", "b"]), EXT, "pkg/ext.so", _deps([EXT, "/site/dep.so"]), "pkg")
    assert [(p.kind, p.severity, p.detail) for p in result.problems] == [
        ("symbols_unchecked", "info", "pkg/ext.so: 2 undefined symbol(s) not found elsewhere may come from dep.so, "
                                      "which has no section headers")]
    assert result.missing == 0


def test_an_unreadable_symbol_table_is_corrupt_and_counts_nothing():
    result = S.undefined_symbols(_Process({}), _Elf(None), EXT, "pkg/ext.so",
                                 _deps(direct=[Needed("libcuda.so.1", "/drv/libcuda.so.1", "system")]), "pkg")
    assert [(p.kind, p.detail) for p in result.problems] == [
        ("corrupt_elf", "pkg/ext.so: cannot read dynamic symbols (malformed .dynsym)")]
    assert (result.needed, result.missing) == (0, 0)
