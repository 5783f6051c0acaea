# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading files that someone else wrote, without hanging or running out of memory.

``open_regular`` opens with ``O_NONBLOCK`` (a FIFO opens at once instead of
waiting for a writer) and checks with ``fstat`` on the open descriptor that it
holds a regular file, so a symlink to ``/dev/zero`` or a FIFO is refused
instead of being read forever.  ``read_regular`` also bounds the read by the
size the format allows and says so when a file is larger, instead of cutting
it short.  Errors are ``OSError`` with a readable ``strerror`` so callers'
``except OSError`` paths report them.  Standard library only.
"""


import errno
import os
import stat

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode):
    """'a FIFO', 'a character device', ... for a non-regular st_mode."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


class NotRegularFile(OSError):
    """The path names something other than a regular file."""


class FileTooLarge(OSError):
    """The file is larger than its format allows here."""


def open_regular(path, nofollow=False):
    """File descriptor of ``path`` opened read-only, refused unless it is a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if nofollow and exc.errno == errno.ELOOP:
            raise NotRegularFile(errno.ELOOP, "is a symbolic link", path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, "is %s, not a regular file" % kind_of(st.st_mode), path)
        # back to blocking reads: O_NONBLOCK only mattered for open() itself
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path, limit, nofollow=False):
    """Bytes of the regular file ``path``; FileTooLarge above ``limit`` bytes (never a silent cut)."""
    fd = open_regular(path, nofollow)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileTooLarge(errno.EFBIG, "is %d bytes, more than the %d this format allows" % (size, limit), path)
        chunks = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise FileTooLarge(errno.EFBIG, "grew past the %d bytes this format allows" % limit, path)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path, limit, nofollow=False):
    """``read_regular`` decoded as UTF-8; undecodable bytes become U+FFFD."""
    return read_regular(path, limit, nofollow).decode("utf-8", "replace")
