"""pyapi/closure.py and abi_check's python_api on small synthetic site-packages (a fake sglang importing from a
fake sgl_kernel), through the engine and through the module."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi
from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.closure import missing_names
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.modpath import (
    EXTENSION,
    NAMESPACE,
    SOURCE,
    find_module,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import file_owners, scan
from ansible_collections.dflash.deploy.plugins.modules import abi_check as abi_module


def add_dist(site: Path, name, version, files: dict, top_level=None, unrecorded=()):
    """A distribution with ``files`` ({rel path: source}); ``unrecorded`` files are written but not in RECORD."""
    di = site / ("%s-%s.dist-info" % (name.replace("-", "_"), version))
    di.mkdir(parents=True)
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    if top_level:
        (di / "top_level.txt").write_text("\n".join(top_level) + "\n")
    rows = []
    for rel, text in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text) if isinstance(text, str) else "")
        if rel not in unrecorded:
            rows.append("%s,," % rel)
    rows.append("%s/RECORD,," % di.name)
    (di / "RECORD").write_text("\n".join(rows) + "\n")


SGL_KERNEL = {
    "sgl_kernel/__init__.py": """
        import torch
        from sgl_kernel.sampling import top_k_renorm_prob, top_p_renorm_prob as renamed
        from sgl_kernel.allreduce import *
        from .gemm import *
        from sgl_kernel import elementwise
        if torch.version.hip is not None:
            from sgl_kernel.elementwise import gelu_quick
        def awq_dequantize(x):
            return x
        for _name in _NAMES:
            if _name in globals():
                globals()[_name] = wrap(globals()[_name])
        """,
    "sgl_kernel/sampling.py": """
        def top_k_renorm_prob(p): pass
        def top_p_renorm_prob(p): pass
        def min_p_internal(p): pass
        """,
    "sgl_kernel/allreduce.py": """
        __all__ = ["all_reduce", "_exported_private"]
        def all_reduce(): pass
        def not_exported(): pass
        """,
    "sgl_kernel/gemm/__init__.py": """
        from .fp8 import *
        """,
    "sgl_kernel/gemm/fp8.py": """
        def fp8_scaled_mm(): pass
        def _hidden(): pass
        """,
    "sgl_kernel/elementwise.py": """
        def silu_and_mul(): pass
        """,
    "sgl_kernel/speculative.py": "",
}

SGLANG = {
    "sglang/__init__.py": "",
    "sglang/launch_server.py": """
        from sglang.srt.server_args import prepare_server_args
        def run_server():
            from sglang.srt.entrypoints.http_server import launch_server
        """,
    "sglang/srt/__init__.py": "",
    "sglang/srt/server_args.py": """
        def prepare_server_args(): pass
        """,
    "sglang/srt/entrypoints/__init__.py": "",
    "sglang/srt/entrypoints/http_server.py": """
        from sglang.srt.layers import sampler
        from ..layers.quantization import awq
        from sglang.srt.layers.unused import nothing_here
        """,
    "sglang/srt/layers/__init__.py": "",
    "sglang/srt/layers/sampler.py": """
        from sglang.srt.utils import is_cuda, is_npu

        if is_cuda():
            from sgl_kernel import (
                min_p_sampling_from_probs,
                top_k_renorm_prob,
            )

        if is_npu():
            import torch_npu
        """,
    "sglang/srt/layers/quantization/__init__.py": "",
    "sglang/srt/layers/quantization/awq.py": """
        from sglang.srt.utils import is_cuda, is_hip
        _is_cuda = is_cuda()
        _is_hip = is_hip()
        if _is_cuda:
            from sgl_kernel import awq_dequantize, awq_marlin_moe_repack, awq_marlin_repack
        elif _is_hip:
            from sgl_kernel import hip_only_kernel
        """,
    "sglang/srt/layers/unused.py": """
        nothing_here = 1
        """,
    "sglang/srt/utils.py": """
        def is_cuda(): return True
        def is_npu(): return False
        def is_hip(): return False
        """,
}


def make_site(tmp_path, sglang=None, sgl_kernel=None, extra=()):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.12.0\n")
    add_dist(site, "sglang-kernel", "0.4.2", dict(SGL_KERNEL, **(sgl_kernel or {})), top_level=["sgl_kernel"])
    add_dist(site, "sglang", "0.5.9", dict(SGLANG, **(sglang or {})), top_level=["sglang"])
    for args in extra:
        add_dist(site, *args)
    return venv, site


def walk(site, entries=("sglang.launch_server", "sglang.srt.entrypoints.http_server"), own=("sglang",), **kw):
    by_path, by_top = file_owners(scan(str(site)))
    return missing_names(str(site), list(entries), own,
                         lambda rel, top: by_path.get(rel) or by_top.get(top) or (), **kw)


def names(result):
    return [(m.importer, m.line, m.module, m.name) for m in result.missing]


def test_cuda_imports_of_missing_names_are_found_in_import_order(tmp_path):
    _venv, site = make_site(tmp_path)
    result = walk(site)
    # hip_only_kernel is under `elif _is_hip:` (not followed); top_k_renorm_prob is re-exported, awq_dequantize
    # defined in sgl_kernel/__init__.py; nothing_here comes from sglang itself (not checked)
    assert names(result) == [
        ("sglang/srt/layers/sampler.py", 5, "sgl_kernel", "min_p_sampling_from_probs"),
        ("sglang/srt/layers/quantization/awq.py", 6, "sgl_kernel", "awq_marlin_moe_repack"),
        ("sglang/srt/layers/quantization/awq.py", 6, "sgl_kernel", "awq_marlin_repack"),
    ]
    miss = result.missing[0]
    assert miss.importer_owners == ("sglang",) and miss.exporter_owners == ("sglang-kernel",)
    assert miss.exporter == "sgl_kernel/__init__.py"
    assert not (miss.protected or miss.lazy or miss.fallback or miss.submodule)
    assert result.truncated is False and result.unparsed == ()
    # launch_server, server_args, http_server and the parents of what it imports, the layers, utils
    assert result.modules == result.start == 12


@pytest.mark.parametrize("imported", [
    "top_k_renorm_prob",     # re-exported from a submodule
    "renamed",               # re-exported under another name
    "all_reduce",            # through a star import whose module has __all__
    "_exported_private",     # in that __all__
    "fp8_scaled_mm",         # through two star imports, the second relative
    "elementwise",           # bound by `from sgl_kernel import elementwise`
    "speculative",           # a submodule nobody imports: `from X import name` imports X.name
    "gelu_quick",            # bound under a guard that is false on CUDA: still defined (conservative)
    "awq_dequantize",        # def
    "torch",                 # import
])
def test_names_sgl_kernel_has(tmp_path, imported):
    _venv, site = make_site(tmp_path, sglang={"sglang/srt/layers/sampler.py": "from sgl_kernel import %s\n" % imported,
                                              "sglang/srt/layers/quantization/awq.py": ""})
    assert names(walk(site)) == []


@pytest.mark.parametrize("imported", ["not_exported", "_hidden", "min_p_internal"])
def test_names_a_star_or_submodule_does_not_bring(tmp_path, imported):
    _venv, site = make_site(tmp_path, sglang={"sglang/srt/layers/sampler.py": "from sgl_kernel import %s\n" % imported,
                                              "sglang/srt/layers/quantization/awq.py": ""})
    assert [n[3] for n in names(walk(site))] == [imported]


def test_try_except_fallback_function_and_lazy_module(tmp_path):
    _venv, site = make_site(tmp_path, sglang={
        "sglang/srt/layers/sampler.py": """
            try:
                from sgl_kernel import protected_name
            except ImportError:
                from sgl_kernel import fallback_name
            def later():
                from sgl_kernel import function_name
                from sglang.srt.layers import lazy_mod
            """,
        "sglang/srt/layers/lazy_mod.py": "from sgl_kernel import lazy_module_name\n",
        "sglang/srt/layers/quantization/awq.py": "",
    })
    got = {m.name: (m.protected, m.fallback, m.lazy) for m in walk(site).missing}
    assert got == {"protected_name": (True, False, False), "fallback_name": (False, True, False),
                   "function_name": (False, False, True), "lazy_module_name": (False, False, True)}


def test_a_module_imported_lazily_first_and_at_start_later_is_start(tmp_path):
    _venv, site = make_site(tmp_path, sglang={
        "sglang/launch_server.py": """
            def run_server():
                from sglang.srt.layers import sampler
            from sglang.srt.layers import sampler
            """,
        "sglang/srt/entrypoints/http_server.py": "",
    })
    result = walk(site)
    assert [(m.name, m.lazy) for m in result.missing] == [("min_p_sampling_from_probs", False)]


def test_a_guarded_import_guards_what_it_leads_to(tmp_path):
    # the ImportError raised while importing optional_mod goes up to the try around its import
    _venv, site = make_site(tmp_path, sglang={
        "sglang/srt/layers/sampler.py": """
            try:
                from sglang.srt.layers import optional_mod
            except ImportError:
                from sglang.srt.layers import fallback_mod
            """,
        "sglang/srt/layers/optional_mod.py": "from sgl_kernel import optional_name\n",
        "sglang/srt/layers/fallback_mod.py": "from sgl_kernel import fallback_only\n",
        "sglang/srt/layers/quantization/awq.py": "",
    })
    got = {m.name: (m.protected, m.fallback, m.lazy) for m in walk(site).missing}
    assert got == {"optional_name": (True, False, False), "fallback_only": (False, True, False)}


def test_a_module_reached_guarded_then_unguarded_is_an_error(tmp_path):
    _venv, site = make_site(tmp_path, sglang={
        "sglang/srt/layers/sampler.py": """
            try:
                from sglang.srt.layers import optional_mod
            except ImportError:
                pass
            def later():
                from sglang.srt.layers import optional_mod
            """,
        "sglang/srt/layers/quantization/awq.py": "from sglang.srt.layers import optional_mod\n",
        "sglang/srt/layers/optional_mod.py": "from sgl_kernel import optional_name\n",
    })
    (miss,) = walk(site).missing
    assert (miss.name, miss.protected, miss.fallback, miss.lazy) == ("optional_name", False, False, False)


def test_missing_submodule_of_another_distribution(tmp_path):
    _venv, site = make_site(tmp_path, sglang={
        "sglang/srt/layers/sampler.py": """
            from sgl_kernel.no_such_module import x
            import sgl_kernel.other_missing
            from sgl_kernel.sampling import top_k_renorm_prob
            import numpy.linalg
            """,
        "sglang/srt/layers/quantization/awq.py": "",
    })
    got = [(m.module, m.name, m.submodule) for m in walk(site).missing]
    assert got == [("sgl_kernel", "no_such_module", True), ("sgl_kernel", "other_missing", True)]


@pytest.mark.parametrize("init", [
    "def __getattr__(name):\n    raise AttributeError(name)\n",          # PEP 562: any name may exist
    "from torch import *\n",                                               # a star outside the package
    "from .nowhere import *\n",                                            # a star that cannot be followed
    "from .computed import *\n",                                           # __all__ computed there
    "exec(open('names.py').read())\n",
    "import sys\nsys.modules[__name__] = Proxy()\n",
    "def broken(:\n",                                                      # does not parse
])
def test_conservative_when_the_namespace_cannot_be_known(tmp_path, init):
    _venv, site = make_site(tmp_path, sgl_kernel={"sgl_kernel/__init__.py": init,
                                                  "sgl_kernel/computed.py": "__all__ = list(NAMES)\n"})
    assert names(walk(site)) == []


def test_extension_and_namespace_modules_are_not_judged(tmp_path):
    _venv, site = make_site(tmp_path, sglang={
        "sglang/srt/layers/sampler.py": "from sgl_kernel.common_ops import anything\nfrom nvidia import whatever\n",
        "sglang/srt/layers/quantization/awq.py": "",
    }, sgl_kernel={"sgl_kernel/common_ops.abi3.so": ""}, extra=[
        ("nvidia-cublas", "13.0", {"nvidia/cublas/__init__.py": ""}, ["nvidia"])])
    assert find_module(str(site), "sgl_kernel.common_ops").kind == EXTENSION
    assert find_module(str(site), "nvidia").kind == NAMESPACE
    assert names(walk(site)) == []


def test_find_module_order(tmp_path):
    site = tmp_path
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg.py").write_text("")
    (site / "mod.py").write_text("")
    (site / "mod.cpython-312-x86_64-linux-gnu.so").write_text("")
    (site / "plain.py").write_text("")
    found = find_module(str(site), "pkg")
    assert (found.kind, found.rel, found.is_package) == (SOURCE, "pkg/__init__.py", True)
    assert find_module(str(site), "mod").kind == EXTENSION
    assert find_module(str(site), "plain").rel == "plain.py"
    assert find_module(str(site), "absent") is None
    assert find_module(str(site), "bad-name") is None
    assert find_module(str(site), "plain.sub") is None


def test_unowned_and_overlaid_files(tmp_path):
    # an overlaid sglang file no RECORD lists still belongs to sglang (its top-level name); a module no
    # distribution claims is neither followed nor judged
    _venv, site = make_site(tmp_path, sglang={
        "sglang/srt/layers/sampler.py": "from sglang.srt.layers import overlay\nfrom stray import x\n",
        "sglang/srt/layers/overlay.py": "from sgl_kernel import dflash_kernel\n",
        "sglang/srt/layers/quantization/awq.py": "",
    })
    (site / "stray.py").write_text("")
    rec = site / "sglang-0.5.9.dist-info" / "RECORD"
    rec.write_text("\n".join(r for r in rec.read_text().splitlines() if "overlay" not in r) + "\n")
    assert [(m.importer, m.name) for m in walk(site).missing] == [("sglang/srt/layers/overlay.py", "dflash_kernel")]


def test_unparsed_file_and_truncation(tmp_path):
    _venv, site = make_site(tmp_path, sglang={"sglang/srt/layers/sampler.py": "def broken(:\n"})
    result = walk(site)
    assert [u.rel for u in result.unparsed] == ["sglang/srt/layers/sampler.py"]
    assert "SyntaxError" in result.unparsed[0].reason
    assert walk(site, max_modules=3).truncated is True


def test_deep_chains_are_read_past_the_recursion_bound(tmp_path, monkeypatch):
    from ansible_collections.dflash.deploy.plugins.module_utils.pyapi import closure
    monkeypatch.setattr(closure, "MAX_DEPTH", 2)
    _venv, site = make_site(tmp_path)
    assert [n[3] for n in names(walk(site))] == ["min_p_sampling_from_probs", "awq_marlin_moe_repack",
                                                 "awq_marlin_repack"]


# --- through abi_check: findings, severity, the one-line message ---

def test_abi_check_python_api_findings_and_message(tmp_path):
    venv, _site = make_site(tmp_path, sglang={"sglang/srt/layers/sampler.py": """
        from sglang.srt.utils import is_cuda
        if is_cuda():
            from sgl_kernel import min_p_sampling_from_probs
        try:
            from sgl_kernel import optional_kernel
        except ImportError:
            optional_kernel = None
        """})
    result = abi.check(str(venv), packages=["sglang"], gpu_ccs=[(9, 0)], python_api=True)
    assert result["compatible"] is False
    assert result["msg"] == (
        "sglang 0.5.9 imports min_p_sampling_from_probs from sgl_kernel (sglang/srt/layers/sampler.py:4), which "
        "sglang-kernel 0.4.2 does not define: install the sglang-kernel version sglang pins, or sglang built for "
        "sglang-kernel 0.4.2 (and 2 more errors: awq_marlin_moe_repack, awq_marlin_repack)")
    missing = [f for f in result["findings"] if f["kind"] == "missing_python_name"]
    assert [(f["severity"], f["path"], f["name"], f["module"], f["distributions"]) for f in missing] == [
        ("error", "sglang/srt/layers/sampler.py:4", "min_p_sampling_from_probs", "sgl_kernel", ["sglang-kernel"]),
        ("error", "sglang/srt/layers/quantization/awq.py:6", "awq_marlin_moe_repack", "sgl_kernel",
         ["sglang-kernel"]),
        ("error", "sglang/srt/layers/quantization/awq.py:6", "awq_marlin_repack", "sgl_kernel", ["sglang-kernel"]),
        ("warning", "sglang/srt/layers/sampler.py:6", "optional_kernel", "sgl_kernel", ["sglang-kernel"]),
    ]
    assert missing[3]["detail"].endswith("(under try/except ImportError: the server goes on without it)")
    summary = result["python_api"]["sglang"]
    assert summary["entries"] == ["sglang.launch_server", "sglang.srt.entrypoints.http_server"]
    assert summary["missing"] == 4 and summary["unparsed"] == [] and summary["truncated"] is False


def test_abi_check_without_python_api_is_unchanged(tmp_path):
    venv, _site = make_site(tmp_path)
    result = abi.check(str(venv), packages=["sglang"], gpu_ccs=[(9, 0)])
    assert result["compatible"] is True and "python_api" not in result
    assert not [f for f in result["findings"] if f["kind"] == "missing_python_name"]


def test_abi_check_two_owners_and_a_package_without_entries(tmp_path):
    venv, site = make_site(tmp_path, extra=[("sgl-kernel", "0.3.21", {"sgl_kernel/__init__.py": ""},
                                             ["sgl_kernel"])])
    (site / "sgl_kernel" / "__init__.py").write_text("def top_k_renorm_prob(): pass\n")
    result = abi.check(str(venv), packages=["sglang", "sglang-kernel"], gpu_ccs=[(9, 0)], python_api=True)
    top = F.root_cause(result["findings"])
    assert top["kind"] == "missing_python_name"
    assert "which sgl-kernel 0.3.21 or sglang-kernel 0.4.2 does not define" in top["detail"]
    assert top["fix"].startswith("install the sgl-kernel or sglang-kernel version sglang pins")
    # sglang-kernel has no entry of its own: its package is the start
    assert result["python_api"]["sglang-kernel"]["entries"] == ["sgl_kernel"]


def test_abi_check_reports_unparsed_files_as_info(tmp_path):
    venv, _site = make_site(tmp_path, sglang={"sglang/srt/layers/sampler.py": "match = (\n"})
    result = abi.check(str(venv), packages=["sglang"], gpu_ccs=[(9, 0)], python_api=True)
    info = [f for f in result["findings"] if f["kind"] == "python_api_incomplete"]
    assert len(info) == 1 and info[0]["severity"] == "info"
    assert "1 file not parsed (e.g. sglang/srt/layers/sampler.py: SyntaxError" in info[0]["detail"]


def test_lazy_finding_is_a_warning(tmp_path):
    venv, _site = make_site(tmp_path, sglang={"sglang/srt/layers/sampler.py": """
        def sample():
            from sgl_kernel import min_p_sampling_from_probs
        """, "sglang/srt/layers/quantization/awq.py": ""})
    result = abi.check(str(venv), packages=["sglang"], gpu_ccs=[(9, 0)], python_api=True)
    assert result["compatible"] is True
    (warn,) = [f for f in result["findings"] if f["kind"] == "missing_python_name"]
    assert warn["severity"] == "warning" and warn["load"] == "lazy"
    assert warn["detail"].endswith("(imported only when a function runs, not at server start)")


def test_module_option(tmp_path, capsys):
    venv, _site = make_site(tmp_path)
    args = {"venv": str(venv), "packages": ["sglang"], "python_api": True, "gpu_compute_capabilities": ["9.0"],
            "_ansible_check_mode": True}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            abi_module.main()
    out = capsys.readouterr().out
    res = json.loads(out[out.index("{"):])
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"].startswith("sglang 0.5.9 imports min_p_sampling_from_probs from sgl_kernel "
                                 "(sglang/srt/layers/sampler.py:5), which sglang-kernel 0.4.2 does not define")
    assert res["python_api"]["sglang"]["missing"] == 3
