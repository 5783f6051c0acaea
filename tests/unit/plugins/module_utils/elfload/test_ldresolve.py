"""elfload/ldcache.py against ldconfig -p, and elfload/ldresolve.py against the real loader on the same files."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import abi_native as N
import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import (
    LdCacheError,
    SystemLibraries,
    parse_ld_cache,
    read_ld_so_conf,
)
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldresolve import (
    Resolver,
    expand_tokens,
    split_path_list,
)


def test_ld_cache_matches_ldconfig():
    with open("/etc/ld.so.cache", "rb") as fh:
        entries = parse_ld_cache(fh.read())
    ours = set((name, path) for name, flags, path in entries if flags == 0x0303)
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    ref = set()
    for line in out.splitlines()[1:]:
        if "=>" in line and "x86-64" in line:
            left, path = line.split("=>")
            ref.add((left.strip().split(" ")[0], path.strip()))
    assert ours == ref and len(ours) > 10


def test_ld_cache_errors_and_conf(tmp_path):
    with pytest.raises(LdCacheError):
        parse_ld_cache(b"garbage")
    with pytest.raises(LdCacheError):
        parse_ld_cache(b"glibc-ld.so.cache1.1" + b"\xff\xff\x00\x00" + b"\0" * 24)
    root = tmp_path / "root"
    (root / "etc" / "ld.so.conf.d").mkdir(parents=True)
    (root / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n/opt/one\n")
    (root / "etc" / "ld.so.conf.d" / "a.conf").write_text("# comment\n/opt/cuda/lib\n")
    assert read_ld_so_conf(str(root)) == ["/opt/cuda/lib", "/opt/one"]
    (root / "opt" / "cuda" / "lib").mkdir(parents=True)
    (root / "opt" / "cuda" / "lib" / "libcudart.so.13").write_bytes(b"x")
    sysl = SystemLibraries(str(root))
    assert sysl.cache_error and sysl.find("libcudart.so.13") == str(root / "opt/cuda/lib/libcudart.so.13")
    assert SystemLibraries(library_dirs=[str(root / "opt/cuda/lib")]).find("libcudart.so.13")
    assert SystemLibraries(library_dirs=[]).find("libc.so.6") is None


def test_tokens():
    assert expand_tokens("$ORIGIN/../lib", "/a/b") == "/a/lib"
    assert expand_tokens("${ORIGIN}/x", "/a") == "/a/x"
    assert split_path_list("/a::/b;/c") == ["/a", "/b", "/c"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    d = tmp_path_factory.mktemp("ld")
    liba = N.build_lib(d / "app" / "lib1" / "liba.so.1", "int a(void){return 1;}", soname="liba.so.1")
    b_src = "int b(void){return %d;}"
    b_lld = N.build_lib(d / "lld" / "libb.so.1", b_src % 2, soname="libb.so.1")
    b_rp = N.build_lib(d / "app" / "rp" / "libb.so.1", b_src % 3, soname="libb.so.1")
    src = "int a(void); int b(void); int e(void){return a()+b();}"
    common = dict(libs=[liba, b_rp])
    ext_rpath = N.build_lib(d / "app" / "pkg" / "ext_rpath.so", src, rpath="$ORIGIN/../lib1:$ORIGIN/../rp", **common)
    ext_runpath = N.build_lib(d / "app" / "pkg" / "ext_runpath.so", src, rpath="$ORIGIN/../lib1:$ORIGIN/../rp",
                              runpath=True, **common)
    zzz = N.build_lib(d / "tmp" / "libzzz.so.1", "int z(void){return 0;}", soname="libzzz.so.1")
    ext_missing = N.build_lib(d / "app" / "pkg" / "ext_missing.so", "int z(void); int e(void){return z();}",
                              libs=[zzz])
    os.remove(zzz)
    return {"d": d, "b_lld": b_lld, "b_rp": b_rp, "liba": liba, "ext_rpath": ext_rpath,
            "ext_runpath": ext_runpath, "ext_missing": ext_missing}


LOADER = r"""
import ctypes, json, sys
res = {}
try:
    for p in sys.argv[2:]:
        ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(sys.argv[1])
    maps = open("/proc/self/maps").read()
    res["paths"] = sorted(set(l.split()[-1] for l in maps.splitlines() if l.split()[-1].startswith("/")))
except OSError as e:
    res["error"] = str(e)
print(json.dumps(res))
"""


def real_loader(ext, lld=None, preload=()):
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    if lld:
        env["LD_LIBRARY_PATH"] = lld
    out = subprocess.run([sys.executable, "-c", LOADER, str(ext), *map(str, preload)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def ours(ext, lld=None, preload=()):
    r = Resolver(SystemLibraries(), split_path_list(lld))
    for p in preload:
        r.closure(str(p), commit=True)
    return r.closure(str(ext))


@pytest.mark.parametrize("ext,use_lld,preload", [
    ("ext_rpath", True, False),      # RPATH beats LD_LIBRARY_PATH
    ("ext_runpath", True, False),    # LD_LIBRARY_PATH beats RUNPATH
    ("ext_runpath", False, False),   # RUNPATH alone
    ("ext_rpath", True, True),       # an already loaded SONAME beats everything
])
def test_resolution_matches_real_loader(tree, ext, use_lld, preload):
    lld = str(tree["d"] / "lld") if use_lld else None
    pre = [tree["b_lld"]] if preload else []
    real = real_loader(tree[ext], lld, pre)
    sim = ours(tree[ext], lld, pre)
    assert "error" not in real
    got_b = [d["path"] for d in sim["needed"][str(tree[ext])] if d["name"] == "libb.so.1"][0]
    real_b = [p for p in real["paths"] if p.endswith("/libb.so.1")]
    assert [os.path.realpath(got_b)] == [os.path.realpath(p) for p in real_b]
    assert not sim["missing"]


def test_missing_matches_real_loader(tree):
    real = real_loader(tree["ext_missing"])
    sim = ours(tree["ext_missing"])
    assert "libzzz.so.1: cannot open shared object file" in real["error"]
    assert [m["name"] for m in sim["missing"]] == ["libzzz.so.1"]
    assert sim["missing"][0]["searched"]
