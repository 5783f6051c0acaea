# Who controls the host layout, read-only, standard library only: before root writes anything,
# every directory it is about to use must be one that no other user can swap or fill.
# usage: python3 dflash_layout.py '<json request>'  -> prints {"problems": [...], "loose": [...]}
# request: {"service_user": str, "service_group": str,
#           "root_dirs": [dir],     root's own (made and kept root-owned by the role)
#           "shared_dirs": [dir],   root's own, made by other roles (releases, artifacts, tools, cache)
#           "release_dirs": [dir],  directories whose entries are releases (each a real, root-owned directory)
#           "service_parents": [dir],  root's own, which roles before this check left to the service user
#                                      (/var/lib/dflash, /var/cache/dflash): the service user as owner is put back
#           "service_dirs": [dir],  the service user's instance directories (never a symlink)
#           "staged_dirs": [dir],   model directories root writes from the controller (model_controller_dir):
#                                   root's, like root_dirs, but wherever the operator put them
#           "keep": [{"path", "group", "mode"}]}  root's directories as the role keeps them
# A problem is one line naming the path and what to do. "loose": existing shared_dirs and
# releases that others may write (the role removes group/other write from them). "unkept": the
# "keep" paths that are not yet a directory owned by root, with that group and exactly that mode
# (followed as the file module follows them); the role puts back only those.
# A symlink is followed only when root made it (an operator's /opt/dflash -> /data/dflash);
# every directory above a layout path and on root's PATH must be root's and not writable by others.
import grp
import json
import os
import pwd
import stat
import sys


def who(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def lstat(path):
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def target(path):
    try:
        return os.readlink(path)
    except OSError:
        return "?"


class Reader:
    def __init__(self, request):
        self.problems = []
        self.loose = []
        self.seen = set()
        try:
            self.service_uid = pwd.getpwnam(request.get("service_user") or "").pw_uid
        except KeyError:
            self.service_uid = None  # not created yet: nothing can be owned by it
        try:
            self.service_gid = grp.getgrnam(request.get("service_group") or "").gr_gid
        except KeyError:
            self.service_gid = None
        self.layout = set()
        for key in ("root_dirs", "shared_dirs", "service_parents", "service_dirs"):
            self.layout.update(os.path.normpath(p) for p in request.get(key) or [])

    def say(self, path, what):
        line = "host layout: %s %s" % (path, what)
        if line not in self.problems:
            self.problems.append(line)

    def writable_by_others(self, st):
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
            return False  # sticky (/tmp): others may add entries, not replace root's
        group_can = st.st_mode & stat.S_IWGRP and self.service_gid is not None and st.st_gid == self.service_gid
        return bool(st.st_mode & stat.S_IWOTH or group_can)

    def follow(self, path, st):
        """(stat of what path names, or None with a problem said) - a symlink only when root made it."""
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != 0:
                self.say(path, "is a symlink (-> %s) made by %s: root would follow it; remove it and check what "
                               "it points at" % (target(path), who(st.st_uid)))
                return None
            try:
                st = os.stat(path)
            except OSError:
                self.say(path, "is a dangling symlink (-> %s): remove it or make its target" % target(path))
                return None
        if not stat.S_ISDIR(st.st_mode):
            self.say(path, "is not a directory: move it away")
            return None
        return st

    def ancestors(self, path):
        """Every existing directory above path that is not itself a layout path: root's, not writable by others."""
        parts = os.path.normpath(path).split("/")[1:-1]
        for i in range(len(parts) + 1):
            above = "/" + "/".join(parts[:i])
            if above in self.layout or above in self.seen:
                continue
            self.seen.add(above)
            st = lstat(above)
            if st is None:
                return
            st = self.follow(above, st)
            if st is None:
                return
            if st.st_uid != 0:
                self.say(above, "is owned by %s, not root: whoever owns it can replace what is below it; "
                                "chown root:root it" % who(st.st_uid))
            elif self.writable_by_others(st):
                self.say(above, "is writable by others (mode %04o): whoever can write it can replace what is below "
                                "it; chmod go-w it" % stat.S_IMODE(st.st_mode))

    def root_dir(self, path, shared=False, service_may_own=False):
        self.ancestors(path)
        st = lstat(path)
        if st is None:
            return
        st = self.follow(path, st)
        if st is None:
            return
        if service_may_own and self.service_uid is not None and st.st_uid == self.service_uid:
            return  # what earlier versions made; its instance directories are checked, then root takes it back
        if st.st_uid != 0:
            self.say(path, "is owned by %s, not root: someone else may have changed what it holds; check it, "
                           "then chown root:root it" % who(st.st_uid))
        elif shared and self.writable_by_others(st):
            self.loose.append(path)

    def release(self, path):
        st = lstat(path)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            self.say(path, "is a symlink (-> %s): a release is a directory that root built; remove the link"
                           % target(path))
        elif not stat.S_ISDIR(st.st_mode):
            return  # a stray file: the release roles ignore it
        elif st.st_uid != 0:
            self.say(path, "is owned by %s, not root: its code may have been changed; remove the release"
                           % who(st.st_uid))
        elif self.writable_by_others(st):
            self.loose.append(path)

    def service_dir(self, path):
        self.ancestors(path)
        st = lstat(path)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            self.say(path, "is a symlink (-> %s) made by %s: root would follow it and hand its target to the "
                           "service user; remove it and check what it points at" % (target(path), who(st.st_uid)))
        elif not stat.S_ISDIR(st.st_mode):
            self.say(path, "is not a directory: move it away")
        elif st.st_uid not in (0, self.service_uid):
            self.say(path, "is owned by %s, not the service user or root: move it away" % who(st.st_uid))

    def path_dirs(self):
        for entry in os.environ.get("PATH", "").split(":"):
            if not entry.startswith("/") or lstat(entry) is None:
                continue
            before = len(self.problems)
            self.ancestors(entry + "/x")  # the PATH directory itself and everything above it
            for i in range(before, len(self.problems)):
                self.problems[i] += " (on root's PATH: a command root runs by name could be replaced)"


def unkept(keep):
    """The paths of ``keep`` that are not a directory root:<group> with exactly <mode>, in order."""
    out = []
    for want in keep:
        try:
            st = os.stat(want["path"])
            gid = grp.getgrnam(want["group"]).gr_gid
        except (OSError, KeyError):
            out.append(want["path"])  # missing, unreadable, or its group not made yet
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_gid != gid \
                or stat.S_IMODE(st.st_mode) != int(str(want["mode"]), 8):
            out.append(want["path"])
    return out


def main():
    request = json.loads(sys.argv[1])
    reader = Reader(request)
    reader.path_dirs()
    for path in request.get("root_dirs") or []:
        reader.root_dir(os.path.normpath(path))
    for path in request.get("service_parents") or []:
        reader.root_dir(os.path.normpath(path), service_may_own=True)
    for path in request.get("shared_dirs") or []:
        reader.root_dir(os.path.normpath(path), shared=True)
    for parent in request.get("release_dirs") or []:
        try:
            names = sorted(os.listdir(parent))
        except (FileNotFoundError, NotADirectoryError):
            names = []
        for name in names:
            reader.release(os.path.join(parent, name))
    for path in request.get("service_dirs") or []:
        reader.service_dir(os.path.normpath(path))
    for path in request.get("staged_dirs") or []:
        reader.root_dir(os.path.normpath(path))
    json.dump({"problems": reader.problems, "loose": reader.loose, "unkept": unkept(request.get("keep") or [])},
              sys.stdout)


if __name__ == "__main__":
    main()
