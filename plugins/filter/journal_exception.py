# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""journal_exception: the exception line a failed SGLang server left in its journal.

    {{ journal.stdout_lines | dflash.deploy.journal_exception }}
      ->  'ImportError: cannot import name ...'  or  ''  when there is none

The journal is read with `journalctl -o cat`, so each line is what the server wrote. SGLang's
logger puts a timestamp in front of its own lines, with the process's role when it has one:

    [2026-12-01 11:40:12] ImportError: cannot import name 'x' from 'sgl_kernel'
    [2026-12-01 11:40:12 TP0] Scheduler hit an exception: Traceback (most recent call last):
      File ".../scheduler.py", line 2701, in run_scheduler_process
        ...
    RuntimeError: CUDA error: an illegal memory access was encountered

A traceback that Python prints itself has no prefix, and the logged one continues on lines
without it. The answer is the last line that, without that prefix, is an exception line
(`[module.]NameError: message`, or the class alone), or the last logged line that carries one
after a colon ("Scheduler hit an exception: RuntimeError: …"); the prefix is not repeated.
Indented lines (a traceback's frames and source) never count.

A server that refused its own command line died before it logged anything: argparse prints its
usage and then ``launch_server.py: error: argument --kv-cache-dtype: invalid choice: …`` (seen on
a GPU host, 2026-12-07); such a line is said as ``the server refused its arguments: <the line>``.

A server that could not bind its port (``[Errno 98]`` / "Address already in use", from uvicorn,
asyncio or Python itself) died of that, whatever its teardown logged after: such a line wins, said
as ``port 30001 is already in use (held by another process): <the line>``. The answer is redacted
(plugins/module_utils/redact.py): SGLang logs its ``server_args``, the API key among them.

    {{ text | dflash.deploy.redact_secrets }}   ->  the text, each API key value replaced by ***
"""
from __future__ import annotations

import re

from ansible_collections.dflash.deploy.plugins.module_utils.redact import redact

# "[2026-12-01 11:40:12]", "[2026-12-01 11:40:12 TP0]", "[2026-12-01 11:40:12 DP1 TP3 EP3]"
_PREFIX = re.compile(r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?: [^\]]*)?\]\s*")
_CLASS = r"(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Interrupt|Exit)"
_LINE = re.compile(rf"{_CLASS}(?::\s.*|:?\s*)")
_AFTER_COLON = re.compile(rf":\s+({_CLASS}:\s.*)")
_IN_USE = re.compile(r"\[Errno 98\]|address already in use", re.IGNORECASE)
_BIND_PORT = re.compile(r"\(\s*'[^']*',\s*(\d+)\s*\)|\bport\s+(\d+)", re.IGNORECASE)
_LEVEL = re.compile(r"(?:ERROR|CRITICAL|WARNING):\s+")
# argparse's last words: "<prog>: error: <message>" (prog: launch_server.py, sglang, ...)
_ARGPARSE = re.compile(r"[^\s:\[][^:]{0,80}: error: (?:argument |unrecognized arguments|the following arguments).*")


def arguments_refused(line) -> str:
    """'the server refused its arguments: <line>' for argparse's error line; '' for any other."""
    text = str(line).rstrip("\r\n")
    prefix = _PREFIX.match(text)
    if prefix:
        text = text[prefix.end():]
    if not _ARGPARSE.fullmatch(text) or _LINE.fullmatch(text):  # "ValueError: error: ..." is an exception
        return ""
    return "the server refused its arguments: " + text


def address_in_use(line) -> str:
    """'port N is already in use (held by another process): <line>' for a line that says the server
    could not bind its port (Errno 98); '' for any other line."""
    text = str(line).rstrip("\r\n")
    prefix = _PREFIX.match(text)
    if prefix:
        text = text[prefix.end():]
    if not _IN_USE.search(text):
        return ""
    text = _LEVEL.sub("", text, count=1).strip()
    port = _BIND_PORT.search(text)
    what = "port %s" % (port.group(1) or port.group(2)) if port else "its port"
    return "%s is already in use (held by another process): %s" % (what, text)


def exception_in_line(line) -> str:
    """The exception this one journal line names, without SGLang's prefix; '' when none."""
    text = str(line).rstrip("\r\n")
    prefix = _PREFIX.match(text)
    if prefix:
        text = text[prefix.end():]
    if not text or text[0].isspace():
        return ""
    if _LINE.fullmatch(text):
        return text.rstrip()
    inner = _AFTER_COLON.search(text)
    return inner.group(1).rstrip() if inner else ""


def journal_exception(lines) -> str:
    """The last exception line of the journal's lines (a list, or one text); '' when none."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    found, in_use, refused = "", "", ""
    for line in lines or []:
        found = exception_in_line(line) or found
        in_use = address_in_use(line) or in_use
        refused = arguments_refused(line) or refused
    return redact(in_use or refused or found)


class FilterModule:
    def filters(self):
        return {"journal_exception": journal_exception, "redact_secrets": redact}
