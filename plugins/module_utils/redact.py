# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""API keys taken out of text before it reaches a task's result (round 3, M4).

SGLang logs ``server_args=ServerArgs(... api_key='...', admin_api_key=None, ...)`` at every start,
so a journal read for a diagnosis holds the instance's key. ``redact`` replaces the value of every
``api_key``-like setting (``api_key='k'``, ``'api_key': 'k'``, ``"api_key": "k"``, ``admin_api_key=k``,
``SGLANG_API_KEY=k``, ``--api-key k``, ``--api-key=k``) and of a ``Bearer`` credential with ``***``,
keeping the quotes and ``None``. Pure; standard library only.
"""

from __future__ import annotations

import re

MASK = "***"
_QUOTED = r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""
# a setting named ...api_key / ...api-key (any case), then = or :, then its value
_SETTING = re.compile(r"""(?i)(\b[\w.-]*api[_-]key['"]?\s*[=:]\s*)(%s|[^\s,)}\]'"]+)""" % _QUOTED)
_FLAG = re.compile(r"(?i)(--[\w-]*api-key(?:=|\s+))(%s|\S+)" % _QUOTED)
_BEARER = re.compile(r"(?i)(\bBearer\s+)([^\s'\",]+)")


def _masked(match):
    value = match.group(2)
    if value == "None":
        return match.group(0)
    if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
        return match.group(1) + value[0] + MASK + value[0]
    return match.group(1) + MASK


def redact(text):
    """``text`` (a str, or a list of lines: each redacted) with every API key value replaced by ***."""
    if isinstance(text, (list, tuple)):
        return [redact(line) for line in text]
    if not isinstance(text, str):
        return text
    for pattern in (_FLAG, _SETTING, _BEARER):
        text = pattern.sub(_masked, text)
    return text
