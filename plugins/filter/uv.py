# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Indexes and proxies for uv, kept off every command line (security m4; issue 44 item 4).

    {{ sglang_venv_index_url | dflash.deploy.uv_index_env(sglang_venv_extra_index_urls) }}
      ->  {UV_DEFAULT_INDEX: ..., UV_INDEX: '...'}: what M(dflash.deploy.uv_command) gives uv
    {{ dflash_proxy_env | dflash.deploy.proxy_env_error('dflash_proxy_env') }}
      ->  '' or one line: a key that is no proxy variable, a value that is not a one-line string
    {{ [sglang_venv_index_url, sglang_venv_proxy_env] | dflash.deploy.has_credentials }}
      ->  whether a URL in it carries userinfo (the no_log of a task whose result would print it)
    {{ url | dflash.deploy.url_redact }}
      ->  the URL (or text, or list) with every userinfo written *** (for messages and records)
"""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils import uv_env as U


def uv_index_env(index_url, extra_index_urls=None):
    return U.index_env(index_url or "", list(extra_index_urls or []))


def proxy_env_error(proxy, name="dflash_proxy_env"):
    return U.proxy_env_error(proxy, name)


def url_redact(value):
    if isinstance(value, (list, tuple)):
        return U.redact_url_list(value)
    return U.redact_urls(value)


def has_credentials(value):
    return U.has_credentials(value)


class FilterModule:
    def filters(self):
        return {"uv_index_env": uv_index_env, "proxy_env_error": proxy_env_error, "url_redact": url_redact,
                "has_credentials": has_credentials}
