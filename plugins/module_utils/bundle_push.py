# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host side of bundle_push: is the received file the bundle the task names, and putting it in place.

A bundle's identity is the sha256 of its ``MANIFEST.json`` member (what the roles read with
``tar -xOf <bundle> MANIFEST.json | sha256sum``); the manifest lists every member's size and
sha256, which site_packages_transplant verifies whenever it uses the bundle. So the received
file is checked by its size against the controller's and by its manifest digest, never read
whole: ``manifest_digest`` opens it as site_packages_transplant will (its headers and manifest only).

``place`` moves the received file to its destination atomically: owner, group and mode are set
on it first, then one rename inside the destination's filesystem. When the received file lies on
another filesystem (or its directory may not be changed by this user), it is copied into a temp
file beside the destination first. Nothing of the destination changes before the rename, and a
refused file never reaches it. With ``keep_src`` (the action's transfer on a local connection, where
``src`` is the controller's own file) it is always copied beside the destination, and left where it is.
Standard library only.
"""


import errno
import grp
import os
import pwd
import shutil
import stat
import tempfile

from ansible_collections.dflash.deploy.plugins.module_utils.transplant.bundle import MANIFEST, Bundle, BundleError

_ACL_XATTRS = ("system.posix_acl_access",)


class PushError(Exception):
    """A received file that is not the bundle the task names, or one that cannot be placed."""


def manifest_digest(path):
    """sha256 (hex) of the ``MANIFEST.json`` member of the bundle ``path``, as site_packages_transplant
    reads it (transplant/bundle.py's Bundle: the tar's headers and the manifest member only).

    Raises PushError when ``path`` is not a regular file holding an uncompressed tar bundle that
    transplant would open: one regular MANIFEST.json of the bundle format, no member past the end."""
    try:
        return Bundle(path).manifest_sha256
    except BundleError as exc:
        raise PushError(str(exc)) from exc


def current_digest(dest):
    """The manifest digest of what ``dest`` holds now; None when there is nothing there, or nothing
    a bundle's digest can be read from (an unreadable or foreign file is replaced like a missing one)."""
    if not os.path.lexists(dest):
        return None
    try:
        return manifest_digest(dest)
    except PushError:
        return None


def check_received(path, want_size, want_sha256):
    """None when ``path`` has ``want_size`` bytes and a manifest of sha256 ``want_sha256``; else the
    one-line reason it is not the bundle the task names (the size is checked first: it costs one stat)."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        return "the received file %s cannot be read: %s" % (path, exc.strerror or exc)
    if size != want_size:
        return ("the received file is %d bytes, the controller's %d: the transfer was cut short or the "
                "controller's file changed during it" % (size, want_size))
    try:
        got = manifest_digest(path)
    except PushError as exc:
        return "the received file is not a bundle: %s" % exc
    if got != want_sha256:
        return ("the received bundle's %s has sha256 %s, not the manifest_sha256 %s the task names: "
                "it is another bundle" % (MANIFEST, got, want_sha256))
    return None


def parse_mode(value):
    """A mode as a number: an int as it is, a string as octal ('0644'). ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("mode %r is not an octal mode" % (value,))
    if isinstance(value, int):
        mode = value
    else:
        try:
            mode = int(str(value), 8)
        except ValueError:
            raise ValueError("mode %r is not an octal mode such as '0644'" % (value,)) from None
    if not 0 <= mode <= 0o7777:
        raise ValueError("mode %r is out of range" % (value,))
    return mode


def resolve_ids(owner, group):
    """(uid, gid) for names or numbers; -1 for what is left out (chown leaves it). PushError for unknown."""
    uid = gid = -1
    if owner is not None:
        try:
            uid = int(owner) if str(owner).isdigit() else pwd.getpwnam(owner).pw_uid
        except KeyError:
            raise PushError("owner %s: no such user on the host" % owner) from None
    if group is not None:
        try:
            gid = int(group) if str(group).isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise PushError("group %s: no such group on the host" % group) from None
    return uid, gid


def attributes_differ(path, uid, gid, mode):
    """Whether ``path``'s owner, group or permission bits differ from the wanted ones (-1/None: any)."""
    st = os.lstat(path)
    return ((uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid)
            or (mode is not None and stat.S_IMODE(st.st_mode) != mode))


def apply_attributes(path, uid, gid, mode):
    """chown then chmod (chown clears set-id bits, so the mode goes last)."""
    if uid != -1 or gid != -1:
        os.chown(path, uid, gid)
    if mode is not None:
        os.chmod(path, mode)


def _drop_acls(path):
    """A file renamed out of Ansible's remote tmp may carry the ACL _fixup_perms2 gave the become user."""
    for name in _ACL_XATTRS:
        try:
            os.removexattr(path, name)
        except (OSError, AttributeError):
            pass


def _same_filesystem(src, dest_dir):
    return os.stat(src).st_dev == os.stat(dest_dir).st_dev


def _copy_beside(src, dest, uid, gid, mode, keep_src=False):
    """Copy ``src`` into a temp file in ``dest``'s directory, set its attributes, rename it over ``dest``;
    then remove ``src`` unless ``keep_src``."""
    dest_dir = os.path.dirname(dest) or "."
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".%s." % os.path.basename(dest), suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            _copy_bytes(inp, out)
        if mode is None:
            mode = stat.S_IMODE(os.stat(src).st_mode)
        apply_attributes(tmp, uid, gid, mode)
        os.rename(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if keep_src:
        return
    try:
        os.unlink(src)
    except OSError:
        pass  # the action removes its tmp dir, and the file with it


def _copy_bytes(inp, out):
    """Kernel-side copy (sendfile between files, Linux >= 2.6.33); falls back to read/write."""
    if not hasattr(os, "sendfile"):
        shutil.copyfileobj(inp, out, 1 << 20)
        return
    size = os.fstat(inp.fileno()).st_size
    offset = 0
    try:
        while offset < size:
            sent = os.sendfile(out.fileno(), inp.fileno(), offset, min(size - offset, 1 << 30))
            if sent == 0:
                break
            offset += sent
    except OSError as exc:
        if offset or exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
        shutil.copyfileobj(inp, out, 1 << 20)
        return
    if offset != size:
        raise OSError(errno.EIO, "copied %d of %d bytes" % (offset, size))


def place(src, dest, uid=-1, gid=-1, mode=None, keep_src=False):
    """Put ``src`` at ``dest`` atomically; returns 'rename' or 'copy' (how it got there).

    Owner, group and mode are set before the rename. A rename across filesystems (EXDEV) or out of
    a directory this user may not change (EACCES, EPERM) becomes a copy beside ``dest``, then a rename.
    ``keep_src``: always that copy, and ``src`` stays (it is not the module's to move)."""
    dest_dir = os.path.dirname(dest) or "."
    if os.path.isdir(dest):
        raise PushError("dest %s is a directory" % dest)
    if not os.path.isdir(dest_dir):
        raise PushError("the directory of dest %s does not exist" % dest)
    if not keep_src and _same_filesystem(src, dest_dir):
        try:
            _drop_acls(src)
            apply_attributes(src, uid, gid, mode)
            os.rename(src, dest)
            return "rename"
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EACCES, errno.EPERM):
                raise
    _copy_beside(src, dest, uid, gid, mode, keep_src)
    return "copy"
