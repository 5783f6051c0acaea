"""`make gpu-kit` (tools/gpu_kit.py): the pinned lists, the download plan, the carry check, and a
second run that downloads and packs nothing.

The end-to-end tests run the tool on a scratch copy of its folders, with tiny wheels built here and
a stand-in for pip that copies them from a folder (and counts its calls): no network.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_kit", REPO / "tools" / "gpu_kit.py")
gpu_kit = importlib.util.module_from_spec(_spec)
sys.modules["gpu_kit"] = gpu_kit
_spec.loader.exec_module(gpu_kit)

MiB = 2**20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the committed lists -----------------------------------------------------------------------

def test_the_committed_lists_pin_every_wheel_exactly_with_its_sha256():
    sets = gpu_kit.load_sets()
    names = {s.name for s in sets}
    assert {"a", "b", "ansible"} <= names
    for s in sets:
        for pin in s.pins:
            assert pin.hashes and all(len(h) == 64 for h in pin.hashes), f"{s.name}: {pin.spec} has no sha256"


def test_the_lists_keep_conflicting_versions_in_sets_of_their_own():
    sets = gpu_kit.load_sets()
    groups = gpu_kit.plan_sets(sets)
    by_version: dict[tuple[str, str], str] = {}
    for s in sets:
        for pin in s.pins:
            by_version[(pin.name, pin.version)] = s.name
    # sglang 0.5.11 (the default source) and 0.5.9 (the overlay's base) are each in one set, not the same
    assert by_version[("sglang", "0.5.11")] != by_version[("sglang", "0.5.9")]
    assert by_version[("huggingface-hub", "0.36.2")] != by_version[("huggingface-hub", "1.33.0")]
    assert groups["base"][0].group == "base"
    # the kernel wheel travels reduced, to the GPU arch of the machines (sm_90)
    (kernel_set,) = [s for s in sets if any(p.name == "sglang-kernel" for p in s.pins)]
    assert "sgl_kernel/sm90/common_ops.abi3.so" in kernel_set.reduce["sglang-kernel"]


# -- parsing ------------------------------------------------------------------------------------

HEAD = "# kit: group base\n# kit: archive wheels-x.tar.xz\n"


def test_parse_reads_pins_hashes_continuations_and_directives():
    h = "a" * 64
    s = gpu_kit.parse_set("x", HEAD + "# kit: reduce Sgl_Kernel --keep-python\n"
                          f"SGL_Kernel==0.4.2 \\\n    --hash=sha256:{h}\n# a comment\n\nPyYAML==6.0.1\n")
    assert (s.group, s.archive) == ("base", "wheels-x.tar.xz")
    assert [(p.name, p.version, p.hashes) for p in s.pins] == [("sgl-kernel", "0.4.2", [h]), ("pyyaml", "6.0.1", [])]
    assert s.reduce == {"sgl-kernel": ["--keep-python"]}


@pytest.mark.parametrize("body, words", [
    ("sglang>=0.5.9\n", "not an exact pin"),
    ("sglang\n", "not an exact pin"),
    ("sglang==0.5.*\n", "not an exact pin"),
    ("sglang==0.5.11\nSGLang==0.5.9\n", "pinned twice"),
    ("sglang==0.5.11 --hash=md5:abc\n", "--hash=sha256"),
    ("# kit: reduce sglang-kernel --keep-python\nsglang==0.5.11\n", "does not pin"),
    ("", "no pinned wheel"),
])
def test_parse_refuses_what_is_not_an_exact_list(body, words):
    with pytest.raises(gpu_kit.KitError, match=words):
        gpu_kit.parse_set("x", HEAD + body)


def test_parse_needs_a_group_and_an_archive():
    with pytest.raises(gpu_kit.KitError, match="no '# kit: archive"):
        gpu_kit.parse_set("x", "# kit: group base\nsglang==0.5.11\n")
    with pytest.raises(gpu_kit.KitError, match="is not a file name"):
        gpu_kit.parse_set("x", "# kit: group base\n# kit: archive ../x.tar\nsglang==0.5.11\n")


def test_plan_refuses_two_sets_in_one_archive_and_a_kit_without_base():
    a = gpu_kit.parse_set("a", HEAD + "sglang==0.5.11\n")
    b = gpu_kit.parse_set("b", HEAD + "sglang==0.5.9\n")
    with pytest.raises(gpu_kit.KitError, match="both pack into wheels-x.tar.xz"):
        gpu_kit.plan_sets([a, b])
    c = gpu_kit.parse_set("c", "# kit: group surge\n# kit: archive c.tar.xz\nsglang-router==0.3.2\n")
    with pytest.raises(gpu_kit.KitError, match="no set is in group base"):
        gpu_kit.plan_sets([c])
    assert list(gpu_kit.plan_sets([c, a])) == ["base", "surge"]


def test_lock_writes_hashes_that_parse_back():
    text = HEAD + "# note\nsglang==0.5.11\nPyYAML==6.0.1\n"
    new = gpu_kit.with_hashes(text, {"sglang==0.5.11": "1" * 64, "pyyaml==6.0.1": "2" * 64})
    s = gpu_kit.parse_set("x", new)
    assert [p.hashes for p in s.pins] == [["1" * 64], ["2" * 64]]
    assert "# note" in new


# -- the download plan ----------------------------------------------------------------------------

def test_nothing_to_download_when_the_cache_holds_each_pinned_wheel_with_its_hash():
    pins = [gpu_kit.Pin("pyyaml", "6.0.1", ["a" * 64]), gpu_kit.Pin("sglang", "0.5.11", [])]
    cached = {"PyYAML-6.0.1-cp312-cp312-manylinux_2_17_x86_64.whl": "a" * 64,
              "sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl": "b" * 64}
    have, missing = gpu_kit.match_cache(pins, cached)
    assert missing == []
    assert have == {"pyyaml==6.0.1": "PyYAML-6.0.1-cp312-cp312-manylinux_2_17_x86_64.whl",
                    "sglang==0.5.11": "sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl"}


def test_a_wheel_with_other_bytes_or_another_version_is_downloaded_again():
    pins = [gpu_kit.Pin("pyyaml", "6.0.1", ["a" * 64]), gpu_kit.Pin("sglang", "0.5.11", ["c" * 64])]
    cached = {"PyYAML-6.0.1-cp312-cp312-manylinux_2_17_x86_64.whl": "f" * 64,
              "sglang-0.5.9-py3-none-any.whl": "c" * 64}
    have, missing = gpu_kit.match_cache(pins, cached)
    assert have == {}
    assert [p.spec for p in missing] == ["pyyaml==6.0.1", "sglang==0.5.11"]


# -- the carry check ----------------------------------------------------------------------------

def test_each_call_carries_base_and_at_most_one_other_group():
    calls = gpu_kit.carry_calls({"base": {"a": 30 * MiB, "b": 10 * MiB}, "surge": {"c": 21 * MiB},
                                 "overlay": {"o": 7 * MiB}})
    assert calls == [("base", [".gpu-carry/kit/base"], 40 * MiB),
                     ("base+overlay", [".gpu-carry/kit/base", ".gpu-carry/kit/overlay"], 47 * MiB),
                     ("base+surge", [".gpu-carry/kit/base", ".gpu-carry/kit/surge"], 61 * MiB)]
    assert gpu_kit.check_calls(calls) == []


def test_a_call_over_64_mib_is_refused_with_its_size():
    calls = gpu_kit.carry_calls({"base": {"a": 40 * MiB}, "surge": {"c": 25 * MiB}})
    assert gpu_kit.check_calls(calls) == [
        "a call carrying base+surge would carry 65.0 MiB, over the 64 MiB one call may carry"]
    assert gpu_kit.check_calls([("x", [f"p{i}" for i in range(9)], 1)]) == [
        "a call carrying x would carry 9 paths, over 8"]


def test_an_archive_is_repacked_only_when_its_wheels_or_its_bytes_changed():
    inputs = [("a.whl", "1" * 64), ("b.whl", "2" * 64)]
    stamp = dict(gpu_kit.pack_stamp(inputs), archive_sha256="9" * 64)
    assert gpu_kit.is_up_to_date(stamp, inputs, "9" * 64)
    assert not gpu_kit.is_up_to_date(stamp, [("a.whl", "1" * 64), ("b.whl", "3" * 64)], "9" * 64)
    assert not gpu_kit.is_up_to_date(stamp, inputs[:1], "9" * 64)
    assert not gpu_kit.is_up_to_date(stamp, inputs, "8" * 64)
    assert not gpu_kit.is_up_to_date(stamp, inputs, None)
    assert not gpu_kit.is_up_to_date(None, inputs, "9" * 64)


# -- end to end, offline ------------------------------------------------------------------------

def make_wheel(folder: Path, name: str, version: str, extra: dict[str, bytes] | None = None) -> Path:
    """A small valid wheel: a module, optional extra members, dist-info with RECORD."""
    members = {f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(), **(extra or {})}
    di = f"{name}-{version}.dist-info"
    members[f"{di}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members[f"{di}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
            for n, d in members.items()]
    members[f"{di}/RECORD"] = ("\n".join(rows + [f"{di}/RECORD,,"]) + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in members.items():
            z.writestr(zipfile.ZipInfo(n, (2026, 1, 1, 0, 0, 0)), d)
    return path


FAKE_PIP = textwrap.dedent("""\
    import os, shutil, sys
    args = sys.argv[1:]
    dest, req = args[args.index("-d") + 1], args[args.index("-r") + 1]
    with open(os.environ["FAKE_PIP_LOG"], "a") as log:
        log.write(" ".join(args) + " :: " + " ".join(open(req).read().split()) + "\\n")
    for line in open(req):
        name, _, version = line.split()[0].partition("==")
        wheel = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        shutil.copy(os.path.join(os.environ["FAKE_INDEX"], wheel), dest)
""")


@pytest.fixture
def kit(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    wheels = [make_wheel(index, "alpha", "1.0"), make_wheel(index, "beta", "2.0"),
              make_wheel(index, "kern", "0.4.2", {"kern/big.so": os.urandom(4096), "kern/sm90.so": b"\x7fELF" * 64})]
    digest = {w.name.split("-")[0]: sha(w.read_bytes()) for w in wheels}
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "a.txt").write_text(f"# kit: group base\n# kit: archive wheels-a.tar.xz\n"
                                 f"alpha==1.0 --hash=sha256:{digest['alpha']}\n"
                                 f"beta==2.0 --hash=sha256:{digest['beta']}\n")
    (lists / "b.txt").write_text(f"# kit: group base\n# kit: archive wheels-b.tar.xz\n"
                                 f"# kit: reduce kern --keep-python --keep kern/sm90.so\n"
                                 f"kern==0.4.2 --hash=sha256:{digest['kern']}\n")
    (lists / "c.txt").write_text(f"# kit: group surge\n# kit: archive wheels-c.tar.xz\n"
                                 f"beta==2.0 --hash=sha256:{digest['beta']}\n")
    carry = tmp_path / "repo" / ".gpu-carry"
    monkeypatch.setattr(gpu_kit, "REPO", tmp_path / "repo")
    monkeypatch.setattr(gpu_kit, "KIT_LISTS", lists)
    monkeypatch.setattr(gpu_kit, "CARRY", carry)
    monkeypatch.setattr(gpu_kit, "CACHE", carry / "cache")
    monkeypatch.setattr(gpu_kit, "KIT_OUT", carry / "kit")
    (tmp_path / "pip.py").write_text(FAKE_PIP)
    monkeypatch.setenv("PIP", f"{sys.executable} {tmp_path / 'pip.py'}")
    monkeypatch.setenv("FAKE_INDEX", str(index))
    monkeypatch.setenv("FAKE_PIP_LOG", str(tmp_path / "pip.log"))
    return tmp_path, carry


def pip_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "pip.log"
    return log.read_text().splitlines() if log.exists() else []


def test_first_run_downloads_each_set_apart_reduces_packs_and_the_second_does_nothing(kit, capsys):
    tmp_path, carry = kit
    assert gpu_kit.main([]) == 0
    calls = pip_calls(tmp_path)
    assert len(calls) == 3        # one download call per set
    assert all("--no-deps" in c and "--only-binary=:all:" in c and "--python-version 3.12" in c
               and "--platform manylinux_2_34_x86_64" in c for c in calls)
    archives = sorted(p.relative_to(carry).as_posix() for p in (carry / "kit").rglob("*.tar.xz"))
    assert archives == ["kit/base/wheels-a.tar.xz", "kit/base/wheels-b.tar.xz", "kit/surge/wheels-c.tar.xz"]
    # the kernel archive holds the reduced wheel: big.so is gone, sm90.so and the Python files stay
    import tarfile
    with tarfile.open(carry / "kit" / "base" / "wheels-b.tar.xz") as tar:
        names = tar.getnames()
    assert "kern-0.4.2-py3-none-any.whl/kern/sm90.so" in names
    assert not any(n.endswith("big.so") for n in names)
    out = capsys.readouterr().out
    assert "call base+surge:" in out and "done: 4 downloaded, 1 reduced, 3 packed" in out

    before = {p: (p.stat().st_mtime_ns, sha(p.read_bytes())) for p in (carry / "kit").rglob("*.tar.xz")}
    assert gpu_kit.main([]) == 0
    assert len(pip_calls(tmp_path)) == 3        # no download call
    after = {p: (p.stat().st_mtime_ns, sha(p.read_bytes())) for p in (carry / "kit").rglob("*.tar.xz")}
    assert after == before                      # nothing rewritten
    out = capsys.readouterr().out
    assert "up to date: nothing downloaded, reduced or packed" in out


def test_a_wheel_with_other_bytes_in_the_cache_is_fetched_again_and_a_new_pin_repacks_its_set_only(kit, capsys):
    tmp_path, carry = kit
    assert gpu_kit.main([]) == 0
    wheel = carry / "cache" / "a" / "alpha-1.0-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes() + b"\0")     # not the pinned bytes any more
    capsys.readouterr()
    assert gpu_kit.main([]) == 0
    assert "alpha==1.0" in pip_calls(tmp_path)[-1] and "beta" not in pip_calls(tmp_path)[-1]
    # the pinned bytes are back: the archive packed from them stays as it is
    assert "done: 1 downloaded, 0 reduced, 0 packed" in capsys.readouterr().out

    new = make_wheel(tmp_path / "index", "beta", "2.1")
    lists = gpu_kit.KIT_LISTS
    (lists / "a.txt").write_text((lists / "a.txt").read_text().split("beta==")[0]
                                 + f"beta==2.1 --hash=sha256:{sha(new.read_bytes())}\n")
    c_before = (carry / "kit" / "surge" / "wheels-c.tar.xz").stat().st_mtime_ns
    assert gpu_kit.main([]) == 0
    out = capsys.readouterr().out
    assert "a: downloading 1 wheel(s): beta==2.1" in out and "done: 1 downloaded, 0 reduced, 1 packed" in out
    assert (carry / "kit" / "surge" / "wheels-c.tar.xz").stat().st_mtime_ns == c_before


def test_a_kit_over_the_limit_fails_with_one_line_naming_the_call(kit, capsys, monkeypatch):
    monkeypatch.setattr(gpu_kit, "CALL_LIMIT", 1024)
    assert gpu_kit.main([]) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("gpu-kit: FAILED: a call carrying base would carry") for line in out.splitlines())
    assert any(line.startswith("gpu-kit: FAILED: a call carrying base+surge would carry") for line in out.splitlines())


def test_an_archive_no_set_packs_any_more_is_removed(kit, capsys):
    tmp_path, carry = kit
    stale = carry / "kit" / "overlay" / "wheels-overlay.tar.xz"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    assert gpu_kit.main([]) == 0
    assert not stale.exists() and not stale.parent.exists()
    assert "removing" in capsys.readouterr().out


def test_a_pin_without_a_recorded_hash_needs_lock(kit, capsys):
    tmp_path, carry = kit
    lists = gpu_kit.KIT_LISTS
    (lists / "a.txt").write_text("# kit: group base\n# kit: archive wheels-a.tar.xz\nalpha==1.0\n")
    assert gpu_kit.main([]) == 1
    assert "has no recorded sha256" in capsys.readouterr().out
    assert gpu_kit.main(["--lock"]) == 0
    assert gpu_kit.parse_set("a", (lists / "a.txt").read_text()).pins[0].hashes == [
        sha((tmp_path / "index" / "alpha-1.0-py3-none-any.whl").read_bytes())]
