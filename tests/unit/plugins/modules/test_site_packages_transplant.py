"""site_packages_transplant end to end on synthetic venvs, run as Ansible runs a module."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from transplant_support import (
    CPTAG,
    REPO,
    add_dist,
    leftovers,
    make_venv,
    record_state,
    run_module,
    site_packages,
    snapshot,
)

TAG = f"{CPTAG}-{CPTAG}-linux_x86_64"


def _torch_files(label: bytes, big: int = 200_000) -> dict:
    return {
        "torch/__init__.py": b"import os\nVERSION = %r\n" % label,
        "torch/lib/libtorch_cuda.so": label * (big // len(label)),
        "torch/nn/__init__.py": b"# nn " + label,
        "torch/_C.py": b"x = 1\n",
    }


@pytest.fixture
def venvs(tmp_path):
    src = make_venv(tmp_path / "src")
    dest = make_venv(tmp_path / "dest")
    add_dist(src, "torch", "2.11.0+cu130", dict(_torch_files(b"cu130"), **{"torch/only_130.py": b"n"}),
             scripts={"torchrun": "from torch import VERSION\nprint(VERSION)\n"}, tag=TAG)
    add_dist(src, "nvidia-cuda-runtime", "13.0.96", {"nvidia/cu13/lib/libcudart.so.13": b"cudart13" * 1000})
    add_dist(src, "nvidia-cublas", "13.1.0", {"nvidia/cu13/lib/libcublas.so.13": b"cublas13" * 1000})
    add_dist(dest, "torch", "2.11.0+cu128", dict(_torch_files(b"cu128"), **{"torch/only_128.py": b"o"}),
             scripts={"torchrun": "print('old')\n"}, tag=TAG)
    add_dist(dest, "nvidia-cuda-runtime-cu12", "12.8.90",
             {"nvidia/__init__.py": b"", "nvidia/cuda_runtime/lib/libcudart.so.12": b"cudart12"})
    add_dist(dest, "nvidia-nccl-cu12", "2.27.3", {"nvidia/__init__.py": b"", "nvidia/nccl/lib/libnccl.so.2": b"nccl"})
    add_dist(dest, "requests", "2.32.0", {"requests/__init__.py": b"r"})
    return src, dest


ARGS = {"distributions": ["torch", "nvidia-*"], "remove": ["nvidia-cuda-runtime-cu12"]}


def _args(src, dest, **extra):
    return dict(ARGS, src=str(src), dest=str(dest), **extra)


def test_upgrade_then_noop(venvs):
    src, dest = venvs
    src_before = snapshot(src)
    rc, result = run_module(_args(src, dest), diff=True)
    assert rc == 0, result
    assert result["changed"] is True
    assert {(m["name"], m["from"], m["to"]) for m in result["moved"]} == {
        ("torch", "2.11.0+cu128", "2.11.0+cu130"), ("nvidia-cuda-runtime", None, "13.0.96"),
        ("nvidia-cublas", None, "13.1.0")}
    assert result["removed"] == [{"name": "nvidia-cuda-runtime-cu12", "version": "12.8.90"}]
    assert result["kept_shared"] == ["nvidia/__init__.py"]  # nccl-cu12 stays and claims it
    assert result["diff"]["before"] == "nvidia-cuda-runtime-cu12==12.8.90\ntorch==2.11.0+cu128\n"
    assert "torch==2.11.0+cu130" in result["diff"]["after"]
    assert result["files_removed"] == 2  # torch/only_128.py and libcudart.so.12
    assert result["elapsed"] > 0 and result["backup_kept"] is False
    state = record_state(dest)
    assert state["problems"] == []
    assert state["dists"] == {"nvidia-cublas": "13.1.0", "nvidia-cuda-runtime": "13.0.96",
                              "nvidia-nccl-cu12": "2.27.3", "requests": "2.32.0", "torch": "2.11.0+cu130"}
    multi = {p: o for p, o in state["owners"].items() if len(o) > 1}
    assert multi == {}
    sp = site_packages(dest)
    assert not (sp / "torch" / "only_128.py").exists()
    assert not (sp / "nvidia" / "cuda_runtime").exists()  # emptied dir pruned, namespace kept
    assert (sp / "nvidia" / "__init__.py").exists() and (sp / "nvidia" / "nccl" / "lib").is_dir()
    script = (dest / "bin" / "torchrun").read_text()
    assert script.startswith(f"#!{dest}/bin/python\n")
    out = subprocess.run([str(dest / "bin" / "torchrun")], capture_output=True, text=True, check=True)
    assert "cu130" in out.stdout
    assert leftovers(dest) == [] and not (dest / ".dflash-transplant").exists()
    assert snapshot(src) == src_before

    rc, again = run_module(_args(src, dest))
    assert rc == 0 and again["changed"] is False, again
    assert again["moved"] == [] and again["files_copied"] == 0 and again["files_linked"] == 0
    # that it decides from RECORD and stat alone (no file contents read): test_transplant_decisions.py
    assert {u["name"] for u in again["unchanged"]} == {"torch", "nvidia-cuda-runtime", "nvidia-cublas"}


def test_check_mode_changes_nothing(venvs):
    src, dest = venvs
    before = snapshot(dest)
    rc, result = run_module(_args(src, dest), check=True, diff=True)
    assert rc == 0 and result["changed"] is True
    assert result["plan"]["files_to_delete"] == 2 and result["plan"]["files_to_write"] > 10
    assert "torch==2.11.0+cu128" in result["diff"]["before"]
    assert snapshot(dest) == before
    assert not (dest / ".dflash-transplant").exists()


@pytest.mark.parametrize("link", ["hardlink", "copy"])
def test_link_modes(venvs, link):
    src, dest = venvs
    rc, result = run_module(_args(src, dest, link=link))
    assert rc == 0, result
    lib = "lib/python%d.%d/site-packages/torch/lib/libtorch_cuda.so" % sys.version_info[:2]
    same = os.path.samefile(src / lib, dest / lib)
    assert same is (link == "hardlink")
    assert result["link_methods"] == (["copy", "hardlink"] if link == "hardlink" else ["copy"])
    # scripts and RECORD are always written, never linked (their content differs)
    assert not os.path.samefile(src / "bin" / "torchrun", dest / "bin" / "torchrun")
    assert record_state(dest)["problems"] == []


def test_existing_inodes_never_written(venvs, tmp_path):
    """uv hardlinks venv files from its cache: the old inode must keep its bytes."""
    src, dest = venvs
    target = site_packages(dest) / "torch" / "__init__.py"
    cache_link = tmp_path / "uv-cache-copy"
    os.link(target, cache_link)
    old = cache_link.read_bytes()
    rc, result = run_module(_args(src, dest, link="copy"))
    assert rc == 0, result
    assert cache_link.read_bytes() == old and b"cu130" in target.read_bytes()


def test_keep_backups(venvs):
    src, dest = venvs
    rc, result = run_module(_args(src, dest, keep_backups=1))
    assert rc == 0 and result["backup_kept"] is True
    backup = Path(result["backup"])
    assert (backup / "site-packages" / "torch" / "only_128.py").read_bytes() == b"o"
    assert (backup / "site-packages" / "torch-2.11.0+cu128.dist-info" / "RECORD").exists()
    assert (backup / "bin" / "torchrun").read_text().endswith("print('old')\n")


def test_remove_only(venvs):
    dest = venvs[1]
    rc, result = run_module({"dest": str(dest), "remove": ["requests", "not-installed"]})
    assert rc == 0 and result["changed"] is True
    assert result["removed"] == [{"name": "requests", "version": "2.32.0"}]
    assert not (site_packages(dest) / "requests").exists()
    assert record_state(dest)["problems"] == []
    rc, result = run_module({"dest": str(dest), "remove": ["requests"]})
    assert rc == 0 and result["changed"] is False


def test_bundle_roundtrip(venvs, tmp_path):
    src, dest = venvs
    bundle = tmp_path / "torch-cu130.tar"
    rc, result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle),
                             "distributions": ["torch", "nvidia-*"]})
    assert rc == 0 and result["changed"] is True, result
    assert result["size"] == bundle.stat().st_size and tarfile.is_tarfile(bundle)
    mtime = bundle.stat().st_mtime_ns
    rc, result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle),
                             "distributions": ["torch", "nvidia-*"]})
    assert rc == 0 and result["changed"] is False and bundle.stat().st_mtime_ns == mtime
    rc, result = run_module({"bundle": str(bundle), "dest": str(dest), "remove": ARGS["remove"]})
    assert rc == 0 and result["changed"] is True, result
    assert result["files_linked"] == 0 and result["bytes_copied"] > 200_000
    state = record_state(dest)
    assert state["problems"] == [] and state["dists"]["torch"] == "2.11.0+cu130"
    assert (dest / "bin" / "torchrun").read_text().startswith(f"#!{dest}/bin/python\n")
    rc, result = run_module({"bundle": str(bundle), "dest": str(dest), "remove": ARGS["remove"]})
    assert rc == 0 and result["changed"] is False


def _refused(args, dest, match, **kw):
    before = snapshot(dest)
    rc, result = run_module(args, **kw)
    assert rc != 0 and result.get("failed"), result
    assert match in result["msg"], result["msg"]
    assert snapshot(dest) == before
    return result


def test_tampered_bundle_refused(venvs, tmp_path):
    src, dest = venvs
    bundle = tmp_path / "b.tar"
    rc, _result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle), "distributions": ["torch"]})
    assert rc == 0
    with tarfile.open(bundle) as tar:
        offset = tar.getmember("site-packages/torch/lib/libtorch_cuda.so").offset_data
    with open(bundle, "r+b") as handle:
        handle.seek(offset + 100)
        handle.write(b"EVIL")
    _refused({"bundle": str(bundle), "dest": str(dest)}, dest, "checksum mismatch")


def test_escape_path_in_record_refused(venvs):
    src, dest = venvs
    add_dist(src, "evil", "1.0", {"evil/__init__.py": b""},
             record_extra=[("../../../../../etc/evil.conf", "sha256=AAAA", "4")])
    _refused(_args(src, dest, distributions=["torch", "evil"]), dest, "escapes site-packages")
    add_dist(src, "evil2", "1.0", {"evil2/__init__.py": b""}, record_extra=[("/etc/evil.conf", "sha256=AAAA", "4")])
    _refused(_args(src, dest, distributions=["evil2"]), dest, "absolute path")


def test_missing_record_refused(venvs):
    src, dest = venvs
    add_dist(src, "norecord", "1.0", {"norecord/__init__.py": b""}, write_record=False)
    _refused(_args(src, dest, distributions=["norecord"]), dest, "has no RECORD")


def test_wrong_abi_refused(venvs):
    src, dest = venvs
    add_dist(src, "ext", "1.0", {"ext/_c.so": b"\x7fELF"}, tag="cp39-cp39-manylinux_2_28_x86_64")
    _refused(_args(src, dest, distributions=["ext"]), dest, "built for cp39-cp39-manylinux_2_28_x86_64")


def test_src_equal_dest_refused(venvs):
    dest = venvs[1]
    _refused(_args(dest, dest), dest, "same venv")
    _refused(_args(str(dest) + "/", dest), dest, "same venv")


def test_dest_not_a_venv_refused(venvs, tmp_path):
    src = venvs[0]
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "file").write_text("x")
    _refused(_args(src, plain), plain, "is not a virtual environment")


def test_unknown_distribution_refused(venvs):
    src, dest = venvs
    _refused(_args(src, dest, distributions=["torchh"]), dest, "no distribution matching 'torchh'")


def test_argument_errors(venvs):
    src, dest = venvs
    rc, result = run_module({"dest": str(dest), "src": str(src), "bundle": "/x", "distributions": ["torch"]})
    assert rc != 0 and "mutually exclusive" in result["msg"]
    rc, result = run_module({"dest": str(dest), "src": str(src)})
    assert rc != 0 and "missing parameter(s) required by 'src': distributions" in result["msg"]


def test_through_ansible_cli(venvs):
    """The module resolves from the checkout (ansible.cfg collections_path) and reports changed honestly."""
    src, dest = venvs
    cmd = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "dflash.deploy.site_packages_transplant",
           "-a", f"src={src} dest={dest} distributions=torch,nvidia-* remove=nvidia-cuda-runtime-cu12"]
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "CHANGED" in first.stdout
    second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, check=False)
    assert second.returncode == 0 and "SUCCESS" in second.stdout and "\"changed\": false" in second.stdout
    assert record_state(dest)["problems"] == []


@pytest.mark.parametrize("via_bundle", [False, True])
def test_wheel_data_files_travel_inside_the_venv(venvs, tmp_path, via_bundle):
    """Real wheels install data-scheme files beside site-packages (sympy's
    ../../../share/man/man1/isympy.1): they move with their distribution and
    leave with it, and nothing outside the destination venv is touched."""
    src, dest = venvs
    man = "../../../share/man/man1/isympy.1"
    add_dist(src, "sympy", "1.14.0", {"sympy/__init__.py": b"s = 1\n", man: b".TH ISYMPY 1\n"})
    args = {"dest": str(dest), "distributions": ["sympy"]}
    if via_bundle:
        bundle = tmp_path / "sympy.tar"
        rc, result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle),
                                 "distributions": ["sympy"]})
        assert rc == 0, result
        with tarfile.open(bundle) as tar:
            assert "venv/share/man/man1/isympy.1" in tar.getnames()
        args["bundle"] = str(bundle)
    else:
        args["src"] = str(src)
    rc, result = run_module(args)
    assert rc == 0 and result["changed"] is True, result
    assert (dest / "share" / "man" / "man1" / "isympy.1").read_bytes() == b".TH ISYMPY 1\n"
    assert record_state(dest)["problems"] == []
    rc, result = run_module(args)
    assert rc == 0 and result["changed"] is False, result
    rc, result = run_module({"dest": str(dest), "remove": ["sympy"]})
    assert rc == 0 and result["changed"] is True
    assert not (dest / "share" / "man" / "man1" / "isympy.1").exists()
    assert (dest / "lib").is_dir() and record_state(dest)["problems"] == []
