# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a host shows now, read the same way when a deploy records it and when a later run
compares it (compare.py): the I/O half of ``dflash.deploy.deploy_state``.

Every reader is read-only, follows no link and has a timeout where it runs a program. The
standard library and ansible-core's module_utils only.
"""

from __future__ import annotations

import glob
import grp
import hashlib
import os
import pwd
import stat

from ansible_collections.dflash.deploy.plugins.module_utils import fingerprint as FP
from ansible_collections.dflash.deploy.plugins.module_utils.fileio import open_regular
from ansible_collections.dflash.deploy.plugins.module_utils.host import listener, readiness
from ansible_collections.dflash.deploy.plugins.module_utils.host.lock import TOKEN_PREFIX
from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import find_program
from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import run_with_timeout

HASH_LIMIT = 1 << 20  # files up to this size are compared by contents as well (configuration files, uv's marker)
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "FragmentPath", "DropInPaths",
                   "NeedDaemonReload")
GPU_QUERY = "index,uuid,pci.bus_id,driver_version"
TIMEOUT = 30


def _sha256_of(path):
    """sha256 of a regular file's bytes, opened without following a link."""
    digest = hashlib.sha256()
    with os.fdopen(open_regular(path, nofollow=True), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def path_entry(path, hash_limit=HASH_LIMIT):
    """What ``lstat`` says of ``path`` (a link is described, not followed): kind, mode and owner for
    every kind; a link's target; a regular file's size, modification time and, up to ``hash_limit``
    bytes, the sha256 of its contents. A directory's size and time are left out: they change with
    what others write in it (the service's state and cache directories)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"kind": "absent"}
    except OSError as exc:
        return {"kind": "unreadable", "error": exc.strerror or str(exc)}
    out = {"kind": FP.entry_kind(st.st_mode), "mode": "%04o" % stat.S_IMODE(st.st_mode), "uid": st.st_uid,
           "gid": st.st_gid}
    if stat.S_ISLNK(st.st_mode):
        out["link"] = os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        out["size"] = st.st_size
        out["mtime_ns"] = st.st_mtime_ns
        if st.st_size <= hash_limit:
            try:
                out["sha256"] = _sha256_of(path)
            except OSError as exc:
                out["sha256"] = "unreadable: %s" % (exc.strerror or exc)
    return out


def tree_sha256(path):
    """The release tree's fingerprint (fingerprint.py, the one verification records), or None when it
    is not a real directory or cannot be walked."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return None
        return FP.fingerprint(path).sha256
    except OSError:
        return None


def parse_units(text):
    """``systemctl show -p … a b`` output: one block per unit, blank-line separated, keyed by Id."""
    units = {}
    for block in text.split("\n\n"):
        state = readiness.parse_unit_state(block)
        if state.get("Id"):
            units[state["Id"]] = state
    return units


def unit_states(units, systemctl=None):
    """{unit: {property: value}} for the units, from one ``systemctl show`` (by absolute path, programs.py);
    {} without an answer."""
    systemctl = systemctl or find_program("systemctl")
    if not units or not systemctl:
        return {}
    argv = [systemctl, "show"]
    for prop in UNIT_PROPERTIES:
        argv += ["-p", prop]
    rc, out, _err, timed_out = run_with_timeout(argv + ["--"] + list(units), TIMEOUT)
    if rc is None or timed_out:
        return {}
    return parse_units(out)


def parse_gpu_rows(text):
    """Rows of ``--query-gpu=GPU_QUERY --format=csv,noheader`` as lists of stripped strings."""
    return [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]


def gpu_rows(nvidia_smi):
    """Each GPU's index, UUID, bus id and driver version as nvidia-smi lists them; None when it gives
    no answer (not installed, hung, an error)."""
    if not nvidia_smi:
        return None
    rc, out, _err, timed_out = run_with_timeout(
        [nvidia_smi, "--query-gpu=" + GPU_QUERY, "--format=csv,noheader"], TIMEOUT)
    if rc != 0 or timed_out:
        return None
    return parse_gpu_rows(out)


def account(kind, name):
    """A user's uid, primary gid, home, shell and other groups, or a group's gid and members;
    None when there is no such account."""
    try:
        if kind == "user":
            pw = pwd.getpwnam(name)
            others = sorted(g.gr_name for g in grp.getgrall() if name in g.gr_mem)
            return [pw.pw_uid, pw.pw_gid, pw.pw_dir, pw.pw_shell, others]
        gr = grp.getgrnam(name)
        return [gr.gr_gid, sorted(gr.gr_mem)]
    except KeyError:
        return None


def lock_tokens(prefix=TOKEN_PREFIX):
    """The host lock's token files: each one is a run that holds the lock or waits for it."""
    return sorted(glob.glob(glob.escape(prefix) + "*"))


def health(base, model, env_file, timeout=TIMEOUT, probe=readiness.get, unit=None, user=None):
    """None when ``base`` answers /health_generate with 200 and /v1/models names ``model``, else why
    not (one probe each, no waiting, each within ``timeout`` seconds in all). The API key is read from the
    env file on the host; a base that is not http(s) is refused (round 3, m3). Each probe goes out only when
    ``unit``'s processes (or ``user``'s) hold the port (listener.guard): a port held by anyone else is the
    answer, and gets neither the request nor the key."""
    if readiness.base_error(base):
        return readiness.base_error(base)
    key = readiness.api_key(env_file)
    try:
        probe = listener.guard(probe, base, unit, user)
        return _health(base, model, key, timeout, probe)
    except (listener.ForeignListener, ValueError) as exc:
        return str(exc)


def _health(base, model, key, timeout, probe):
    status, body = probe(base.rstrip("/") + "/health_generate", key, timeout)
    if status != 200:
        return readiness.health_reason(status, body)
    status, body = probe(base.rstrip("/") + "/v1/models", key, timeout)
    if status != 200:
        return "/v1/models answered %s" % (status if status is not None else "nothing: " + body)
    return readiness.models_reason(model, readiness.parse_models(body))


def output_sha256(text):
    """sha256 of a command's output as Ansible's command module returns it (trailing newlines
    removed), so a digest the controller took of a task's stdout compares with one taken here."""
    return hashlib.sha256(text.rstrip("\r\n").encode("utf-8", "surrogateescape")).hexdigest()


def command_sha256(argv, stdin, env, timeout=300):
    """``output_sha256`` of what the command prints when it exits 0 (stdin given as text), else None."""
    if not argv:
        return None
    full_env = dict(os.environ)
    full_env.update(env or {})
    rc, out, _err, timed_out = _run_with_stdin(argv, stdin, full_env, timeout)
    if rc != 0 or timed_out:
        return None
    return output_sha256(out)


def _run_with_stdin(argv, stdin, env, timeout):
    """run_with_timeout with the text ``stdin`` fed through a pipe (a temporary file would outlive a kill)."""
    import subprocess  # local: only this reader feeds stdin

    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as exc:
        return None, "", str(exc), False
    try:
        out, err = proc.communicate((stdin or "").encode("utf-8"), timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return proc.returncode, "", "", True
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), False
