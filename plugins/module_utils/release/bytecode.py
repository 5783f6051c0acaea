# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bytecode compiled into a release as root, without running the release's own interpreter (release_bytecode).

The release is root's; verification and the server run as the service user, who cannot write
``__pycache__``, so without bytecode in the release every interpreter compiles every source it imports
again. Root compiles it once, before the release is fingerprinted and verified.

Root never runs ``<release>/bin/python`` (docs/security.md S13): through its ``site`` module the
release's ``.pth`` files would run as root. It runs the release's *base* interpreter, the real file
``bin/python`` resolves to, which must lie outside the release, be a regular executable file root alone
can change, in directories root alone can change (``programs.roots_alone_dir``), and be the Python
version ``pyvenv.cfg`` names (major.minor: what bytecode depends on). It runs with ``-I -S`` (no user
site, no ``site`` module, no ``.pth``, no ``PYTHON*`` variables), from ``/``, with a small environment
and umask 022, as ``-m compileall -q -j <jobs> <site-packages>``: compileall compiles, it never executes
what it compiles. A file it cannot compile (a template with a ``.py`` name, old syntax in a test) is
reported, not fatal: the interpreter that imports it would fail the same way with or without bytecode.

compileall writes timestamp-checked ``.pyc`` files (the environment carries no ``SOURCE_DATE_EPOCH``)
and leaves an up-to-date one alone, so a second run writes nothing. Standard library only.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import time

from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import roots_alone_dir
from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import run_with_timeout
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import read_venv

CHILD_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
VERSION_CODE = "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.implementation.cache_tag)"
ERROR_LINE = re.compile(r"^\*\*\* Error compiling (.+)\.\.\.$")
MAX_NAMED_ERRORS = 10


class BytecodeError(Exception):
    """A refusal or a failure, said in one line; ``changed`` when ``.pyc`` files were written before it."""

    def __init__(self, msg, changed=False):
        super(BytecodeError, self).__init__(msg)
        self.changed = changed


def stated_version(cfg):
    """(major, minor) that pyvenv.cfg's ``version_info`` (uv) or ``version`` (venv) names, or None."""
    text = (cfg or {}).get("version_info") or (cfg or {}).get("version") or ""
    match = re.match(r"^(\d+)\.(\d+)(?:\.|$)", text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def inside(path, root):
    """Whether the resolved ``path`` is ``root`` (resolved) or below it."""
    root = os.path.realpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def interpreter_problem(path, st):
    """Why the regular-file facts ``st`` of the resolved interpreter ``path`` do not let root run it; None when
    they do: a regular executable file owned by root and writable by no one else, in directories root alone
    can change."""
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        return "%s is not an executable regular file" % path
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "%s is not root's alone (owner uid %d, mode %04o)" % (path, st.st_uid, stat.S_IMODE(st.st_mode))
    if not roots_alone_dir(os.path.dirname(path)):
        return "%s lies in a directory someone other than root can change" % path
    return None


def base_interpreter(release):
    """The resolved base interpreter of the venv ``release`` (its ``bin/python``), or raise BytecodeError.

    Only ``stat`` calls: nothing is run. Refused: no ``bin/python``; one that resolves inside the release
    (a copied interpreter, or a link to one); one that is not root's alone (``interpreter_problem``).
    """
    link = os.path.join(release, "bin", "python")
    if not os.path.lexists(link):
        raise BytecodeError("%s has no bin/python: not a venv" % release)
    real = os.path.realpath(link)
    if inside(real, release):
        raise BytecodeError("refusing to compile %s: its bin/python resolves to %s, inside the release; root runs "
                            "only a base interpreter outside it" % (release, real))
    try:
        st = os.stat(real)
    except OSError as exc:
        raise BytecodeError("%s: bin/python resolves to %s, which cannot be read (%s)"
                            % (release, real, exc.strerror or exc)) from None
    problem = interpreter_problem(real, st)
    if problem:
        raise BytecodeError("refusing to compile %s with its base interpreter: %s" % (release, problem))
    return real


def compile_argv(python, site_packages, jobs):
    """The compileall command: the base interpreter isolated, quiet (errors only), ``jobs`` workers (0: one per
    CPU)."""
    return [python, "-I", "-S", "-m", "compileall", "-q", "-j", str(int(jobs)), site_packages]


def parse_errors(stdout):
    """The files compileall said it could not compile (``*** Error compiling '<path>'...``), in its order."""
    found = []
    for line in stdout.splitlines():
        match = ERROR_LINE.match(line)
        if match:
            try:
                name = ast.literal_eval(match.group(1))
            except (ValueError, SyntaxError):
                name = match.group(1)
            if isinstance(name, str) and name not in found:
                found.append(name)
    return found


def _walk(site_packages):
    """(directory, names of its files) of every real directory below ``site_packages``; links to directories
    are not descended (compileall does not either)."""
    stack = [site_packages]
    while stack:
        current = stack.pop()
        files = []
        try:
            with os.scandir(current) as it:
                for ent in it:
                    if ent.is_dir(follow_symlinks=False):
                        stack.append(ent.path)
                    else:
                        files.append(ent.name)
        except OSError:
            continue
        yield current, files


def pyc_state(site_packages):
    """{path: (size, mtime_ns)} of every ``.pyc`` in a ``__pycache__`` below ``site_packages``."""
    state = {}
    for directory, files in _walk(site_packages):
        if os.path.basename(directory) != "__pycache__":
            continue
        for name in files:
            if name.endswith(".pyc"):
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                state[path] = (st.st_size, st.st_mtime_ns)
    return state


def missing_bytecode(site_packages, cache_tag):
    """How many ``.py`` files below ``site_packages`` have no ``__pycache__/<name>.<cache_tag>.pyc`` (check
    mode's estimate: an existing but stale ``.pyc`` counts as present)."""
    missing = 0
    for directory, files in _walk(site_packages):
        if os.path.basename(directory) == "__pycache__":
            continue
        cache = os.path.join(directory, "__pycache__")
        for name in files:
            if name.endswith(".py") and not os.path.exists(
                    os.path.join(cache, "%s.%s.pyc" % (name[:-3], cache_tag))):
                missing += 1
    return missing


def compare(before, after):
    """(added, rewritten, removed) counts between two ``pyc_state`` answers."""
    added = sum(1 for p in after if p not in before)
    rewritten = sum(1 for p, v in after.items() if p in before and before[p] != v)
    removed = sum(1 for p in before if p not in after)
    return added, rewritten, removed


def base_version(python, timeout):
    """((major, minor), cache tag) of the isolated base interpreter, or raise BytecodeError."""
    rc, out, err, timed_out = run_with_timeout([python, "-I", "-S", "-c", VERSION_CODE], timeout, env=CHILD_ENV,
                                               cwd="/")
    lines = out.split()
    if rc != 0 or timed_out or len(lines) != 2 or not re.match(r"^\d+\.\d+$", lines[0]):
        raise BytecodeError("%s -I -S did not say its version (rc %s): %s"
                            % (python, rc, (err.strip().splitlines() or ["no output"])[-1][:200]))
    major, minor = lines[0].split(".")
    return (int(major), int(minor)), lines[1]


def compile_release(release, jobs=0, timeout=1800, check_mode=False):
    """Compile the release's site-packages with its base interpreter; the result as a dict.

    Raises BytecodeError, one line, for a refusal (not a venv, an interpreter root may not run, a version
    other than the venv's) or a compileall that failed as a whole (it did not start, timed out, or exited
    non-zero naming no file). In check mode nothing runs: ``changed`` is the estimate ``missing_bytecode``
    with the cache tag of pyvenv.cfg's version.
    """
    release = os.path.abspath(release)
    if not os.path.isdir(release) or os.path.islink(release):
        raise BytecodeError("%s is not a release directory (missing, a link, or not a directory)" % release)
    venv = read_venv(release)
    wanted = stated_version(venv.cfg)
    if venv.site_packages is None or wanted is None:
        raise BytecodeError("%s is not a venv (no pyvenv.cfg naming a version, or no lib/pythonX.Y/site-packages)"
                            % release)
    python = base_interpreter(release)
    result = dict(interpreter=python, site_packages=venv.site_packages, errors=[], error_count=0, compiled=0,
                  seconds=0.0)
    if check_mode:
        missing = missing_bytecode(venv.site_packages, "cpython-%d%d" % wanted)
        result.update(changed=missing > 0, compiled=missing, pyc_before=None, pyc_after=None)
        return result
    start = time.monotonic()
    actual, tag = base_version(python, min(timeout, 60))
    if actual != wanted:
        raise BytecodeError("refusing to compile %s: its base interpreter %s is Python %d.%d, the venv is %d.%d"
                            % ((release, python) + actual + wanted))
    before = pyc_state(venv.site_packages)
    old_umask = os.umask(0o022)
    try:
        rc, out, err, timed_out = run_with_timeout(compile_argv(python, venv.site_packages, jobs), timeout,
                                                   env=CHILD_ENV, merge_stderr=True, cwd="/")
    finally:
        os.umask(old_umask)
    after = pyc_state(venv.site_packages)
    added, rewritten, removed = compare(before, after)
    errors = parse_errors(out)
    result.update(changed=bool(added or rewritten or removed), compiled=added, rewritten=rewritten,
                  pyc_before=len(before), pyc_after=len(after), cache_tag=tag, error_count=len(errors),
                  errors=errors[:MAX_NAMED_ERRORS], seconds=round(time.monotonic() - start, 3))
    if rc is None or timed_out or (rc != 0 and not errors):
        why = "timed out after %d s" % timeout if timed_out else "exited %s" % rc
        tail = ((out + err).strip().splitlines() or ["no output"])[-1][:200]
        raise BytecodeError("compileall over %s %s (%d .pyc written before it stopped): %s"
                            % (venv.site_packages, why, added, tail), changed=result["changed"])
    return result
