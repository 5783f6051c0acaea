# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Child processes on the host: one runner with a timeout, one report protocol, one fan-out.

- ``run_with_timeout``: a child in its own session; on timeout the whole
  process group is killed, so nothing it started is left behind.
- The report protocol: a child that has a verdict prints one line
  ``@@DFLASH@@<json>``; the last such line is the report, and a line that is
  not JSON (cut off by a dying child) is no report at all.
- ``child_source``: the text of a child script kept as a module_utils file
  (``smoke_child.py``, ``import_child.py``), sent to ``python -c``; read
  through the module's loader, so it works from the module's zipped payload.
- ``fan_out``: run one function per item in a thread pool, results in the
  items' order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor

REPORT_MARK = "@@DFLASH@@"


def run_with_timeout(argv, timeout, env=None, merge_stderr=False, cwd=None):
    """(rc, stdout, stderr, timed_out); the whole process group is killed on timeout.

    rc is None when the program could not be started (stderr then says why). With ``merge_stderr``
    stderr is read into stdout, in the order the child wrote them.
    """
    # Not AnsibleModule.run_command: it has no timeout and could not kill the child's whole process group.
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, env=env,
                                start_new_session=True, cwd=cwd)
    except OSError as exc:
        return None, "", str(exc), False
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = proc.communicate()
        timed_out = True
    return (proc.returncode, out.decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace"),
            timed_out)


def parse_report(stdout):
    """The child's report (the last ``@@DFLASH@@`` line) as a dict, or None when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(REPORT_MARK):
            try:
                return json.loads(line[len(REPORT_MARK):])
            except ValueError:
                return None
    return None


_SOURCES = {}


def child_source(module):
    """The source text of a child script module (cached)."""
    name = module.__name__
    if name not in _SOURCES:
        loader = getattr(module, "__loader__", None)
        text = loader.get_source(name) if loader is not None and hasattr(loader, "get_source") else None
        if text is None:
            with open(module.__file__) as handle:
                text = handle.read()
        _SOURCES[name] = text
    return _SOURCES[name]


def fan_out(fn, items, workers):
    """{item: fn(item)} for every distinct-or-not item, in the items' order, at most ``workers`` at a time."""
    items = list(items)
    if not items:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        results = list(pool.map(fn, items))
    return dict((item, results[i]) for i, item in enumerate(items))
