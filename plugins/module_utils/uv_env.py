# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What uv is told about indexes and proxies, and how their credentials stay out of sight (security m4).

An index URL may carry credentials (``https://user:token@host/simple``), and so may a proxy
(``http://user:pass@proxy:3128``). On uv's command line they were readable by every local user
(``/proc/<pid>/cmdline``), printed at ``-v`` and logged by the module to the journal. They now reach uv
only through its environment, given to M(dflash.deploy.uv_command) as a module option (never a task's
``environment:``, which Ansible writes onto the remote shell's command line):

- ``index_env``: ``UV_DEFAULT_INDEX`` (what ``--index-url`` was) and ``UV_INDEX`` (what each
  ``--extra-index-url`` was: space-separated, earlier ones first, all before the default index - the
  same priority as the pip-style flags; uv's ``first-index`` strategy either way).
- ``proxy_env_error``: the operator's proxy variables checked in one line (names, one-line strings).
- ``redact_urls`` / ``redact_url_list``: every ``scheme://userinfo@`` written ``scheme://***@`` (for
  messages and records).
- ``has_credentials``: whether any URL in a value carries userinfo (a task printing it is then ``no_log``).
- ``secrets``: the credential parts of an environment, for a module to mask in all it returns.
- ``host_config_files`` / ``host_config_error``: uv and pip configuration files of the host, which
  uv is told to ignore (``UV_NO_CONFIG``): refused with a line naming the file and what to set.

Pure; standard library only.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from urllib.parse import unquote

MASK = "***"
PROXY_NAMES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
# scheme://userinfo@ : userinfo runs to the first '@' before any '/', whitespace or quote
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s@'\"]+)@")
# Never worth masking on their own: shorter parts would blank unrelated text in a module's output.
MIN_SECRET = 4

# uv reads these (UV_NO_CONFIG makes it skip them); pip's are read by nothing the roles run, but an
# operator who wrote one meant the deploy to use it. (path, what it configures)
HOST_CONFIG_FILES = (
    ("/etc/uv/uv.toml", "uv"),
    ("/etc/xdg/uv/uv.toml", "uv"),
    ("{home}/.config/uv/uv.toml", "uv"),
    ("/etc/pip.conf", "pip"),
    ("/etc/xdg/pip/pip.conf", "pip"),
    ("{home}/.config/pip/pip.conf", "pip"),
    ("{home}/.pip/pip.conf", "pip"),
)


def _quote_spaces(url):
    """uv's UV_INDEX is split on whitespace: a space in a URL (which uv's URL parser encodes anyway) is %20."""
    return re.sub(r"\s", lambda m: "%%%02X" % ord(m.group(0)), str(url).strip())


def index_env(index_url="", extra_index_urls=None):
    """uv's environment for an index and extra indexes: {} for neither (uv's own default index)."""
    env = {}
    if index_url:
        env["UV_DEFAULT_INDEX"] = _quote_spaces(index_url)
    extras = [_quote_spaces(u) for u in (extra_index_urls or []) if str(u).strip()]
    if extras:
        env["UV_INDEX"] = " ".join(extras)
    return env


def proxy_env_error(proxy, name="dflash_proxy_env"):
    """'' when ``proxy`` is a dict of proxy variables uv honours, each a one-line string; else one line
    saying what to change (values are never shown: they may hold credentials)."""
    if proxy is None or proxy == {}:
        return ""
    if not isinstance(proxy, dict):
        return "%s must be a dict of proxy variables (%s, in either case), not a %s" % (
            name, ", ".join(PROXY_NAMES), type(proxy).__name__)
    for key in sorted(proxy, key=str):
        if not isinstance(key, str) or key.lower() not in PROXY_NAMES:
            return "%s: %r is not a proxy variable uv reads; use %s (in either case)" % (
                name, key, ", ".join(PROXY_NAMES))
        value = proxy[key]
        if not isinstance(value, str):
            return "%s: %s must be a string, not a %s" % (name, key, type(value).__name__)
        if "\n" in value or "\r" in value or "\0" in value:
            return "%s: %s holds a line break: a proxy variable is one line" % (name, key)
    return ""


def redact_urls(text):
    """``text`` with the userinfo of every URL in it written ``***`` (``https://***@host/simple``)."""
    if not isinstance(text, str):
        return text
    return _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)


def redact_url_list(values):
    """redact_urls over a list (an index list for a record)."""
    return [redact_urls(v) for v in values or []]


def has_credentials(value):
    """Whether a URL with userinfo is anywhere in ``value`` (a string, or lists and dicts of them): a task
    whose result would print it is no_log only then."""
    if isinstance(value, dict):
        return any(has_credentials(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_credentials(v) for v in value)
    return isinstance(value, str) and _USERINFO.search(value) is not None


def secrets(env):
    """The credential parts of the URLs in ``env``'s values (userinfo, its password, their decoded
    forms), longest first; parts shorter than MIN_SECRET are left out (they are still redacted in any
    URL by redact_urls)."""
    found = set()
    for value in (env or {}).values():
        if not isinstance(value, str):
            continue
        for match in _USERINFO.finditer(value):
            userinfo = match.group(2)
            parts = [userinfo]
            if ":" in userinfo:
                parts.append(userinfo.split(":", 1)[1])
            for part in parts:
                found.add(part)
                found.add(unquote(part))
    return sorted((s for s in found if len(s) >= MIN_SECRET), key=lambda s: (-len(s), s))


def host_config_files(exists, home="/root"):
    """The host's uv and pip configuration files that exist: [(path, 'uv' or 'pip')]. ``exists``: a
    function of a path (os.path.exists on the host)."""
    found = []
    for pattern, what in HOST_CONFIG_FILES:
        path = pattern.format(home=home.rstrip("/") or "")
        if exists(path):
            found.append((path, what))
    return found


def host_config_on_host():
    """The host's uv and pip configuration files that exist, as host_config_files gives them, with root's home
    read from the password database (the deploy runs uv as root)."""
    try:
        home = pwd.getpwnam("root").pw_dir
    except KeyError:
        home = "/root"
    return host_config_files(os.path.exists, home)


def host_config_error(found):
    """'' for no file, else one line naming the files, what the deploy does instead and what to set."""
    if not found:
        return ""
    return ("%s on the host: the deploy runs uv with UV_NO_CONFIG=1 and would ignore it; set "
            "sglang_venv_index_url / sglang_venv_extra_index_urls (indexes) and dflash_proxy_env (proxies) "
            "in the inventory instead and remove the file (or set host_preflight_host_config: warn to deploy "
            "without it)" % ", ".join("%s (%s configuration)" % (path, what) for path, what in found))


def run_uv(argv, stdin, env):
    """(rc, stdout, stderr) of uv run as ``argv`` in ``/``, ``stdin`` on its standard input and ``env`` added to
    this process's environment (never its command line); rc None when it could not start. The uv_command
    module's runner: here, as the other host-side runners are (host/runner.py), not in the module file."""
    full_env = dict(os.environ)
    full_env.update(env)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                stderr=subprocess.PIPE, env=full_env, cwd="/")
    except OSError as exc:
        return None, "", "%s: %s" % (argv[0], exc.strerror or exc)
    out, err = proc.communicate((stdin or "").encode("utf-8") if stdin is not None else b"")
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
