"""bundle_push's host side on real tars: the manifest digest is `tar -xOf f MANIFEST.json | sha256sum`'s,
a received file of the wrong size or manifest is refused with one reason, and placing it replaces dest by
one rename, across filesystems by a copy beside dest first, with owner, group and mode set before."""
from __future__ import annotations

import errno
import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import bundle_push as BP
from bundle_tar import make_bundle

SHM = Path("/dev/shm")


def test_the_digest_is_what_tar_and_sha256sum_print(tmp_path):
    digest = make_bundle(tmp_path / "b.tar")
    shell = subprocess.run(f"tar -xOf {tmp_path / 'b.tar'} MANIFEST.json | sha256sum", shell=True, check=True,
                           capture_output=True, text=True).stdout.split()[0]
    assert BP.manifest_digest(str(tmp_path / "b.tar")) == digest == shell


@pytest.mark.parametrize("case, reason", [
    ("no manifest", "has no MANIFEST.json$"),
    ("twice", "holds MANIFEST.json twice"),
    ("truncated", "is truncated: MANIFEST.json declares 61696 bytes past its end"),
    # what site_packages_transplant would refuse to open is no bundle here either (transplant/bundle.py's Bundle)
    ("foreign manifest", "not a dflash-transplant-bundle v1 manifest"),
    ("not a tar", "is not a readable uncompressed tar"),
    ("a FIFO", "not a regular file"),
])
def test_a_file_without_one_readable_manifest_is_refused(tmp_path, case, reason):
    path = tmp_path / "b.tar"
    if case == "no manifest":
        with tarfile.open(path, "w") as tar:
            info = tarfile.TarInfo("x")
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
    elif case == "twice":
        make_bundle(path, extra=(("MANIFEST.json", b"{}"),))
    elif case == "truncated":
        make_bundle(path, manifest=b"m" * 100_000)
        with open(path, "r+b") as handle:
            handle.truncate(path.stat().st_size - 60_000 - 10240)
    elif case == "foreign manifest":
        make_bundle(path, manifest=b'{"format": "something-else"}\n')
    elif case == "not a tar":
        path.write_bytes(os.urandom(4096))
    else:
        os.mkfifo(path)
    with pytest.raises(BP.PushError, match=reason):
        BP.manifest_digest(str(path))
    assert BP.current_digest(str(path)) is None
    assert BP.current_digest(str(tmp_path / "missing")) is None


def test_check_received_names_size_then_digest(tmp_path):
    path = tmp_path / "b.tar"
    digest = make_bundle(path)
    size = path.stat().st_size
    assert BP.check_received(str(path), size, digest) is None
    assert BP.check_received(str(path), size + 1, digest) == (
        "the received file is %d bytes, the controller's %d: the transfer was cut short or the controller's file "
        "changed during it" % (size, size + 1))
    other = "0" * 64
    assert BP.check_received(str(path), size, other) == (
        "the received bundle's MANIFEST.json has sha256 %s, not the manifest_sha256 %s the task names: it is "
        "another bundle" % (digest, other))
    junk = tmp_path / "junk"
    junk.write_bytes(b"\0" * 10)
    assert BP.check_received(str(junk), 10, digest).startswith("the received file is not a bundle: ")
    assert BP.check_received(str(tmp_path / "gone"), 10, digest).startswith("the received file ")


def test_modes_and_ids():
    assert BP.parse_mode("0644") == 0o644 and BP.parse_mode(0o600) == 0o600 and BP.parse_mode(None) is None
    for bad in ("u=rw", True, "99999", 0o17777):
        with pytest.raises(ValueError):
            BP.parse_mode(bad)
    assert BP.resolve_ids(None, None) == (-1, -1)
    assert BP.resolve_ids("root", "0") == (0, 0)
    with pytest.raises(BP.PushError, match="owner no-such-user-x: no such user"):
        BP.resolve_ids("no-such-user-x", None)
    with pytest.raises(BP.PushError, match="group no-such-group-x: no such group"):
        BP.resolve_ids(None, "no-such-group-x")


def _placed(dest: Path, mode: int, data: bytes, uid: int):
    st = dest.stat()
    assert dest.read_bytes() == data
    assert stat.S_IMODE(st.st_mode) == mode and st.st_uid == uid
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]   # no temp file left beside it


def test_same_filesystem_is_one_rename_that_replaces_dest(tmp_path):
    tmp = tmp_path / "tmp"
    out = tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    src = tmp / "bundle.part"
    make_bundle(src)
    data = src.read_bytes()
    src.chmod(0o600)
    (out / "b.tar").write_bytes(b"old")
    inode = src.stat().st_ino
    assert BP.place(str(src), str(out / "b.tar"), os.getuid(), -1, 0o644) == "rename"
    assert (out / "b.tar").stat().st_ino == inode and not src.exists()
    _placed(out / "b.tar", 0o644, data, os.getuid())


def test_keep_src_copies_beside_dest_on_the_same_filesystem_and_leaves_src(tmp_path):
    """The controller's own file on a local connection: never moved, one copy, then the rename."""
    src = tmp_path / "controller" / "cuda-cu130.tar"
    src.parent.mkdir()
    make_bundle(src)
    data = src.read_bytes()
    inode = src.stat().st_ino
    (tmp_path / "out").mkdir()
    assert BP.place(str(src), str(tmp_path / "out" / "b.tar"), -1, -1, 0o644, keep_src=True) == "copy"
    assert src.read_bytes() == data and src.stat().st_ino == inode
    assert (tmp_path / "out" / "b.tar").stat().st_ino != inode
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["b.tar"]
    _placed(tmp_path / "out" / "b.tar", 0o644, data, os.getuid())


@pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm")
def test_another_filesystem_copies_beside_dest_then_renames(tmp_path):
    tmp = Path(os.environ.get("TMPDIR_SHM", str(SHM)))
    if os.stat(tmp).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the test's tmp dir")
    src_dir = tmp / ("bundle-push-test-%d" % os.getpid())
    src_dir.mkdir()
    try:
        src = src_dir / "bundle.part"
        make_bundle(src, payload=3_000_000)
        data = src.read_bytes()
        src.chmod(0o600)
        (tmp_path / "b.tar").write_bytes(b"old")
        assert BP.place(str(src), str(tmp_path / "b.tar"), -1, os.getgid(), 0o640) == "copy"
        assert not src.exists()
        _placed(tmp_path / "b.tar", 0o640, data, os.getuid())
    finally:
        for p in src_dir.iterdir():
            p.unlink()
        src_dir.rmdir()


@pytest.mark.parametrize("err", [errno.EXDEV, errno.EACCES])
def test_a_rename_the_kernel_refuses_becomes_a_copy(tmp_path, monkeypatch, err):
    src = tmp_path / "bundle.part"
    make_bundle(src)
    data = src.read_bytes()
    real = os.rename
    calls = []

    def rename(a, b):
        calls.append((Path(a).name, Path(b).name))
        if a == str(src):
            raise OSError(err, os.strerror(err))
        return real(a, b)

    monkeypatch.setattr(BP.os, "rename", rename)
    out = tmp_path / "out"
    out.mkdir()
    assert BP.place(str(src), str(out / "b.tar"), -1, -1, 0o644) == "copy"
    assert calls[0] == ("bundle.part", "b.tar") and calls[1][0].startswith(".b.tar.") and calls[1][1] == "b.tar"
    _placed(out / "b.tar", 0o644, data, os.getuid())


def test_a_failed_copy_leaves_dest_and_no_temp_file(tmp_path, monkeypatch):
    src = tmp_path / "bundle.part"
    make_bundle(src)
    out = tmp_path / "out"
    out.mkdir()
    (out / "b.tar").write_bytes(b"old")
    monkeypatch.setattr(BP, "_same_filesystem", lambda a, b: False)

    def broken(inp, dst):
        dst.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(BP, "_copy_bytes", broken)
    with pytest.raises(OSError, match="No space left"):
        BP.place(str(src), str(out / "b.tar"))
    assert (out / "b.tar").read_bytes() == b"old" and [p.name for p in out.iterdir()] == ["b.tar"]
    assert src.exists()


def test_dest_a_directory_or_in_a_missing_one_is_refused(tmp_path):
    src = tmp_path / "bundle.part"
    make_bundle(src)
    (tmp_path / "d").mkdir()
    with pytest.raises(BP.PushError, match="is a directory"):
        BP.place(str(src), str(tmp_path / "d"))
    with pytest.raises(BP.PushError, match="does not exist"):
        BP.place(str(src), str(tmp_path / "nowhere" / "b.tar"))
    assert src.exists()


def test_attributes_differ_and_apply(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    path.chmod(0o600)
    assert BP.attributes_differ(str(path), -1, -1, 0o644)
    assert not BP.attributes_differ(str(path), os.getuid(), -1, 0o600)
    BP.apply_attributes(str(path), -1, -1, 0o644)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
