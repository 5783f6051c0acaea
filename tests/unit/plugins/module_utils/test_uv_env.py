"""Indexes and proxies for uv (security m4, issue 44 item 4): what uv's environment gets, what is refused,
what is masked, and the host's own uv/pip configuration refused with a line naming it."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.filter import uv as F
from ansible_collections.dflash.deploy.plugins.module_utils import uv_env as U

TOKEN = "s3cr3t-T0ken"
INDEX = f"https://deploy:{TOKEN}@packages.example.com/simple"


def test_the_index_and_extra_indexes_become_uv_s_environment_in_order():
    env = U.index_env(INDEX, ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"])
    assert env == {"UV_DEFAULT_INDEX": INDEX, "UV_INDEX": "http://127.0.0.1:9/a http://127.0.0.1:9/b"}
    # nothing set: uv's own default index, no empty variable (uv would read "" as an index)
    assert U.index_env("", []) == {} and U.index_env("", None) == {}
    assert U.index_env("", ["http://127.0.0.1:9/x"]) == {"UV_INDEX": "http://127.0.0.1:9/x"}
    # UV_INDEX is split on whitespace: a space inside one URL must not make two indexes
    assert U.index_env("", ["http://127.0.0.1:9/a b"])["UV_INDEX"] == "http://127.0.0.1:9/a%20b"
    assert F.uv_index_env(INDEX) == {"UV_DEFAULT_INDEX": INDEX}


@pytest.mark.parametrize("proxy", [{}, None,
                                   {"https_proxy": "http://u:p@proxy:3128", "NO_PROXY": "localhost,10.0.0.0/8"},
                                   {"HTTP_PROXY": "", "all_proxy": "socks5://proxy:1080"}])
def test_proxy_variables_uv_reads_pass(proxy):
    assert U.proxy_env_error(proxy) == ""


@pytest.mark.parametrize("proxy,message", [
    ({"ftp_proxy": "http://proxy:3128"}, "dflash_proxy_env: 'ftp_proxy' is not a proxy variable uv reads; use "
                                         "http_proxy, https_proxy, no_proxy, all_proxy (in either case)"),
    ({"https_proxy": "http://u:hunter22@proxy:3128\nX=1"}, "dflash_proxy_env: https_proxy holds a line break: a "
                                                           "proxy variable is one line"),
    ({"https_proxy": 3128}, "dflash_proxy_env: https_proxy must be a string, not a int"),
    ("http://proxy:3128", "dflash_proxy_env must be a dict of proxy variables (http_proxy, https_proxy, no_proxy, "
                          "all_proxy, in either case), not a str"),
])
def test_anything_else_is_refused_in_one_line_without_the_value(proxy, message):
    assert U.proxy_env_error(proxy) == message
    assert "\n" not in message and "hunter22" not in message
    renamed = message.replace("dflash_proxy_env", "sglang_venv_proxy_env")
    assert F.proxy_env_error(proxy, "sglang_venv_proxy_env") == renamed


def test_credentials_are_written_as_stars_in_text_and_lists():
    text = f"error: Failed to fetch `{INDEX}/torch/` via http://user:pw@proxy:3128"
    assert U.redact_urls(text) == ("error: Failed to fetch `https://***@packages.example.com/simple/torch/` via "
                                   "http://***@proxy:3128")
    assert U.redact_urls("http://127.0.0.1:9/simple") == "http://127.0.0.1:9/simple"
    assert F.url_redact([INDEX, ""]) == ["https://***@packages.example.com/simple", ""]
    assert F.url_redact(None) is None


def test_a_url_with_credentials_is_found_anywhere_in_a_value():
    assert U.has_credentials(["", [], {"https_proxy": "http://u:p@proxy:3128"}]) is True
    assert U.has_credentials([INDEX]) is True and F.has_credentials(INDEX) is True
    assert U.has_credentials(["http://127.0.0.1:9/simple", ["http://127.0.0.1:9/a"], {"no_proxy": "a@b"}]) is False
    assert U.has_credentials(None) is False


def test_the_secrets_to_mask_are_the_userinfo_and_the_password_longest_first():
    env = {"UV_DEFAULT_INDEX": INDEX, "https_proxy": "http://ops:p%40ss-word@proxy:3128", "UV_NO_CONFIG": "1",
           "UV_INDEX": "http://a:b@127.0.0.1:9/short"}
    # "a:b" is too short to mask on its own (it would blank every "a:b" of the output); redact_urls still hides it
    assert U.secrets(env) == [f"deploy:{TOKEN}", "ops:p%40ss-word", "ops:p@ss-word", TOKEN, "p%40ss-word",
                              "p@ss-word"]
    assert U.secrets({"UV_DEFAULT_INDEX": "http://127.0.0.1:9/simple"}) == []


def test_the_host_s_own_uv_and_pip_configuration_is_named_with_what_to_set():
    present = {"/etc/uv/uv.toml", "/root/.config/pip/pip.conf"}
    found = U.host_config_files(present.__contains__, "/root")
    assert found == [("/etc/uv/uv.toml", "uv"), ("/root/.config/pip/pip.conf", "pip")]
    message = U.host_config_error(found)
    assert message.startswith("/etc/uv/uv.toml (uv configuration), /root/.config/pip/pip.conf (pip configuration) "
                              "on the host: the deploy runs uv with UV_NO_CONFIG=1 and would ignore it; set ")
    for name in ("sglang_venv_index_url", "dflash_proxy_env", "host_preflight_host_config: warn"):
        assert name in message
    assert "\n" not in message
    assert U.host_config_files(lambda path: False) == [] and U.host_config_error([]) == ""
    assert U.host_config_files({"/home/x/.config/uv/uv.toml"}.__contains__, "/home/x/") == [
        ("/home/x/.config/uv/uv.toml", "uv")]
