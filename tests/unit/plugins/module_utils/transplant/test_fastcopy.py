"""transplant/fastcopy.py: link modes, temp-then-rename (existing inodes untouched), ranges, parallel errors."""

from __future__ import annotations

import os
import threading

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.fastcopy import (
    CopyError,
    Job,
    Placer,
    place_copy,
    run_parallel,
)


def _job(tmp_path, src, name="out", **kw):
    dest = tmp_path / name
    st = os.stat(src)
    return Job(str(dest), str(tmp_path / (".tmp-" + name)), st.st_size, 0o751, st.st_mtime_ns, src=str(src), **kw)


@pytest.fixture
def src_file(tmp_path):
    path = tmp_path / "src.bin"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    os.utime(path, ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    return path


def test_copy_preserves_and_replaces_inode(tmp_path, src_file):
    dest = tmp_path / "out"
    dest.write_bytes(b"old content")
    other_link = tmp_path / "other-link"
    os.link(dest, other_link)  # like uv's cache hardlink
    placer = Placer("copy")
    placer.place(_job(tmp_path, src_file))
    assert dest.read_bytes() == src_file.read_bytes()
    assert other_link.read_bytes() == b"old content"  # the old inode was never written to
    st = dest.stat()
    assert st.st_mode & 0o7777 == 0o751 and st.st_mtime_ns == 1_600_000_000_123_456_789
    assert not (tmp_path / ".tmp-out").exists()
    assert (placer.files_copied, placer.bytes_copied, placer.files_linked) == (1, src_file.stat().st_size, 0)


def test_hardlink_mode(tmp_path, src_file):
    placer = Placer("hardlink")
    placer.place(_job(tmp_path, src_file))
    assert os.path.samefile(tmp_path / "out", src_file)
    assert placer.files_linked == 1 and placer.methods == {"hardlink"}
    # placing the same inode again leaves no temp behind
    placer.place(_job(tmp_path, src_file))
    assert sorted(os.listdir(tmp_path)) == ["out", "src.bin"]


def test_auto_prefers_links_on_same_fs(tmp_path, src_file):
    placer = Placer("auto")
    for name in ("a", "b", "c"):
        placer.place(_job(tmp_path, src_file, name))
    assert placer.methods & {"reflink", "hardlink"} and placer.files_linked == 3
    assert (tmp_path / "c").read_bytes() == src_file.read_bytes()


def test_reflink_unsupported_is_an_error(tmp_path, src_file):
    # ext4/tmpfs have no FICLONE: explicit reflink must fail loudly, never silently copy
    placer = Placer("reflink")
    try:
        placer.place(_job(tmp_path, src_file))
    except CopyError as exc:
        assert "reflink" in str(exc)
        assert not (tmp_path / "out").exists()
    else:
        assert placer.methods == {"reflink"}


def test_copy_range_from_offset(tmp_path, src_file):
    data = src_file.read_bytes()
    job = Job(str(tmp_path / "part"), str(tmp_path / ".tmp-part"), 1000, 0o644, None, src=str(src_file),
              offset=4096 + 3)
    place_copy(job)
    assert (tmp_path / "part").read_bytes() == data[4099:5099]


def test_data_job_and_size_change(tmp_path, src_file):
    place_copy(Job(str(tmp_path / "d"), str(tmp_path / ".tmp-d"), 5, 0o700, None, data=b"hello"))
    assert (tmp_path / "d").read_bytes() == b"hello" and (tmp_path / "d").stat().st_mode & 0o777 == 0o700
    job = _job(tmp_path, src_file, "x")
    job.size += 1
    with pytest.raises(CopyError, match="changed size|source ended"):
        place_copy(job)
    assert not (tmp_path / "x").exists() and not (tmp_path / ".tmp-x").exists()


def test_run_parallel_stops_on_error():
    seen = []
    lock = threading.Lock()

    def work(item):
        if item == 3:
            raise ValueError("boom")
        with lock:
            seen.append(item)

    with pytest.raises(ValueError, match="boom"):
        run_parallel(range(200), work, 4)
    assert len(seen) < 200


def test_run_parallel_progress():
    count = []
    run_parallel(range(50), lambda i: None, 4, progress=lambda: count.append(1))
    assert len(count) == 50
