# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put files in place fast and without touching existing inodes.

Every file is materialized under a temporary name in its final directory and
then renamed over the target, so an existing inode (uv hardlinks venv files
from its cache) is never written to.  Data moves by hardlink, reflink
(FICLONE), ``copy_file_range`` (in-kernel, no user-space buffers), or
``sendfile``/large-buffer reads as fallbacks, in a thread pool (the system
calls release the GIL).  Standard library only.
"""


import errno
import fcntl
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

LINK_MODES = ("auto", "hardlink", "reflink", "copy")
FICLONE = 0x40049409
_CHUNK = 1 << 30
_BUF = 1 << 20
_FALLBACK_ERRNOS = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF)


_PROBE_ERRNOS = _FALLBACK_ERRNOS + (errno.EPERM, errno.EMLINK, errno.ENOTTY)


class CopyError(Exception):
    pass


class Job:
    """One file to put in place.

    Exactly one source: ``src`` (a file), ``src`` + ``offset`` (a byte range of
    a file, e.g. a member of an uncompressed tar), or ``data`` (bytes).
    ``direct`` means the target did not exist when planned: the file is then
    created under its final name with O_EXCL (still never an existing inode;
    should one have appeared, it falls back to ``tmp`` + rename).
    """

    __slots__ = ("src", "offset", "size", "data", "tmp", "dest", "mode", "mtime_ns", "direct")

    def __init__(self, dest, tmp, size, mode=0o644, mtime_ns=None, src=None, offset=None, data=None,
                 direct=False):
        self.direct = direct
        self.dest = dest
        self.tmp = tmp
        self.size = size
        self.mode = mode
        self.mtime_ns = mtime_ns
        self.src = src
        self.offset = offset
        self.data = data


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
# sources are opened without following a symlink (the source's files were checked to be regular files)
_RDONLY = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _current_umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _open_tmp(tmp, mode=0o600):
    try:
        return os.open(tmp, _CREATE, mode)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
        os.unlink(tmp)
        return os.open(tmp, _CREATE, mode)


def _open_target(job):
    """(fd, path written): the final name when it is new, else a temp name to rename over it."""
    mode = job.mode & 0o7777
    if job.direct:
        try:
            return os.open(job.dest, _CREATE, mode), job.dest
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
    return _open_tmp(job.tmp, mode), job.tmp


def _copy_range(sfd, dfd, size, offset):
    """Copy size bytes from sfd at offset to dfd at 0; in-kernel when possible."""
    done = 0
    use_cfr = hasattr(os, "copy_file_range")
    while done < size and use_cfr:
        try:
            n = os.copy_file_range(sfd, dfd, min(size - done, _CHUNK), offset + done, done)
        except OSError as exc:
            if exc.errno in _FALLBACK_ERRNOS and done == 0:
                use_cfr = False
                break
            raise
        if n == 0:
            raise CopyError("source ended after %d of %d bytes" % (done, size))
        done += n
    if done >= size:
        return
    os.lseek(dfd, done, os.SEEK_SET)
    while done < size:
        chunk = os.pread(sfd, min(_BUF, size - done), offset + done)
        if not chunk:
            raise CopyError("source ended after %d of %d bytes" % (done, size))
        view = memoryview(chunk)
        while view:
            written = os.write(dfd, view)
            view = view[written:]
        done += len(chunk)


def _finish(fd, job, do_fsync):
    mode = job.mode & 0o7777
    if mode & _UMASK:
        os.fchmod(fd, mode)
    if job.mtime_ns is not None:
        os.utime(fd, ns=(job.mtime_ns, job.mtime_ns))
    if do_fsync:
        os.fsync(fd)


def _rename(tmp, dest, maybe_same_inode=False):
    os.rename(tmp, dest)
    # rename(2) between two links of one inode is a no-op that leaves tmp
    if maybe_same_inode and os.path.lexists(tmp):
        os.unlink(tmp)


def place_copy(job, do_fsync=False, src_fd=None):
    """Copy (or write data) into a new file, set mode/mtime, rename over job.dest if it existed."""
    dfd, written = _open_target(job)
    try:
        if job.data is not None:
            view = memoryview(job.data)
            while view:
                view = view[os.write(dfd, view):]
        elif job.size:
            sfd = src_fd if src_fd is not None else os.open(job.src, _RDONLY)
            try:
                _copy_range(sfd, dfd, job.size, job.offset or 0)
                if src_fd is None and job.offset is None and os.pread(sfd, 1, job.size):
                    raise CopyError("%s changed size (longer than %d bytes)" % (job.src, job.size))
            finally:
                if src_fd is None:
                    os.close(sfd)
        _finish(dfd, job, do_fsync)
    except BaseException:
        os.close(dfd)
        _unlink_quiet(written)
        raise
    os.close(dfd)
    if written != job.dest:
        _rename(written, job.dest)


def place_reflink(job, do_fsync=False):
    sfd = os.open(job.src, _RDONLY)
    try:
        dfd, written = _open_target(job)
        try:
            fcntl.ioctl(dfd, FICLONE, sfd)
            _finish(dfd, job, do_fsync)
        except BaseException:
            os.close(dfd)
            _unlink_quiet(written)
            raise
        os.close(dfd)
    finally:
        os.close(sfd)
    if written != job.dest:
        _rename(written, job.dest)


def place_hardlink(job, do_fsync=False):
    if job.direct:
        try:
            os.link(job.src, job.dest, follow_symlinks=False)
            return
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
    _unlink_quiet(job.tmp)
    os.link(job.src, job.tmp, follow_symlinks=False)
    _rename(job.tmp, job.dest, maybe_same_inode=True)


def _unlink_quiet(path):
    try:
        os.unlink(path)
    except OSError:
        pass


class Placer:
    """Places jobs with one link mode; ``auto`` probes reflink, then hardlink, then copy.

    Counts what was copied and what was linked (hardlink or reflink).
    """

    def __init__(self, link="auto", do_fsync=False, workers=None):
        if link not in LINK_MODES:
            raise CopyError("unknown link mode %r" % (link,))
        self.link = link
        self.do_fsync = do_fsync
        self.workers = workers or default_workers()
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._auto_method = None
        self.files_copied = 0
        self.bytes_copied = 0
        self.files_linked = 0
        self.bytes_linked = 0
        self.methods = set()

    def _count(self, method, size):
        with self._lock:
            self.methods.add(method)
            if method in ("hardlink", "reflink"):
                self.files_linked += 1
                self.bytes_linked += size
            else:
                self.files_copied += 1
                self.bytes_copied += size

    def _auto(self, job):
        """The method for auto mode; the first job probes it (and is placed, returning None)."""
        if self._auto_method is not None:
            return self._auto_method
        with self._probe_lock:
            if self._auto_method is not None:
                return self._auto_method
            try:
                same_fs = os.stat(job.src).st_dev == os.stat(os.path.dirname(job.dest)).st_dev
            except OSError:
                same_fs = False
            order = ("reflink", "hardlink", "copy") if same_fs else ("copy",)
            for candidate in order:
                try:
                    self._place(candidate, job)
                except OSError as exc:
                    if candidate == "copy" or exc.errno not in _PROBE_ERRNOS:
                        raise
                    continue
                self._count(candidate, job.size)
                self._auto_method = candidate
                return None

    def _place(self, method, job):
        if method == "hardlink":
            place_hardlink(job, self.do_fsync)
        elif method == "reflink":
            place_reflink(job, self.do_fsync)
        else:
            place_copy(job, self.do_fsync)

    def needs_probe(self, job):
        """Auto mode has not yet chosen its method, and job (a plain file) would choose it."""
        return self.link == "auto" and self._auto_method is None and job.data is None and job.offset is None

    def links_in_place(self):
        """Files are hardlinked: placing them one after another beats a thread pool."""
        return self.link == "hardlink" or (self.link == "auto" and self._auto_method == "hardlink")

    def link_now(self, src, dest, size):
        """Hardlink file src straight to a new name dest (no temp name: link(2) never overwrites).

        False when that needs place(): link(2) failed (the name exists after all, or an error
        that place() reports properly).  Not thread safe: call it only while no other thread
        places jobs.
        """
        try:
            os.link(src, dest, follow_symlinks=False)
        except OSError:
            return False
        if self.files_linked == 0:
            self.methods.add("hardlink")
        self.files_linked += 1
        self.bytes_linked += size
        return True

    def place(self, job, src_fd=None):
        """Place one job (thread safe)."""
        if job.data is not None or job.offset is not None or src_fd is not None:
            if self.link in ("hardlink", "reflink") and job.data is None:
                raise CopyError("link mode %s needs a file source; a bundle member can only be copied" % self.link)
            place_copy(job, self.do_fsync, src_fd)
            self._count("copy", job.size)
            return
        method = self.link
        if method == "auto":
            method = self._auto(job)
            if method is None:
                return
        try:
            self._place(method, job)
        except OSError as exc:
            if self.link != "auto":
                raise CopyError("cannot %s %s -> %s: %s" % (method, job.src, job.dest, exc.strerror or exc)) from exc
            raise
        self._count(method, job.size)


def default_workers():
    return max(2, min(8, (os.cpu_count() or 1) * 2))


def run_parallel(items, func, workers, progress=None):
    """Call func(item) for every item on a thread pool; stop at the first error.

    ``progress()`` is called after each completed item (from worker threads).
    Items are expected large-first so the long copies start early.
    """
    items = list(items)
    if not items:
        return
    if workers <= 1 or len(items) == 1:
        for item in items:
            func(item)
            if progress:
                progress()
        return
    stop = threading.Event()
    iterator = iter(items)
    it_lock = threading.Lock()

    def worker():
        while not stop.is_set():
            with it_lock:
                item = next(iterator, None)
            if item is None:
                return
            try:
                func(item)
            except BaseException:
                stop.set()
                raise
            if progress:
                progress()

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        futures = [pool.submit(worker) for dummy in range(min(workers, len(items)))]
        wait(futures, return_when=FIRST_EXCEPTION)
        stop_error = None
        for future in futures:
            exc = future.exception()
            if exc is not None and stop_error is None:
                stop_error = exc
        if stop_error is not None:
            raise stop_error
