"""instance_errors: each mistake in an instance list named in one phrase that says what to change;
systemd_env_quote: a value written so that systemd reads back exactly that value."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "dflash_instances_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "instances.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)


def inst(name, gpus, port, **kw):
    return {"name": name, "gpus": gpus, "port": port, "model_path": "/srv/models/Qwen3-8B",
            "served_model_name": name, **kw}


def one_line(errors):
    assert all("\n" not in e and "\r" not in e and "\0" not in e for e in errors), errors
    return errors


def test_a_sound_list_has_no_errors():
    assert mod.instance_errors([inst("a", [1], 30001), inst("b", [2], 30002)]) == []


def test_shared_port_and_gpu_are_named_with_their_instances():
    errors = mod.instance_errors([inst("a", [1], 30001), inst("b", [1, 2], 30001)])
    assert errors == ["port 30001 is assigned to a and b: give each instance its own port",
                      "GPU 1 is assigned to a and b: give each instance its own GPUs"]


def test_port_out_of_range_and_missing_keys():
    errors = mod.instance_errors([inst("a", [1], 70000), {"name": "b", "gpus": [2]}])
    assert "instance a: port 70000 is out of range (1-65535)" in errors
    assert "instance b: set model_path, served_model_name, port" in errors


def test_absent_instances_need_nothing_and_free_their_resources():
    assert mod.instance_errors([inst("a", [1], 30001), {"name": "b", "state": "absent", "port": 30001}]) == []


def test_names_and_states():
    errors = mod.instance_errors([inst("a b", [1], 30001), inst("c", [2], 30002, state="gone"),
                                  inst("c", [3], 30003)])
    assert errors[0] == "instance name c is used twice: names must be unique"
    assert ("instance name 'a b': use letters, digits, '-' and '_' only, starting with a letter or digit "
            "(it becomes the unit sglang-dflash@<name>.service)") in errors
    assert "instance c: state 'gone' is not present or absent" in errors


# --- names: a full match, and a length that fits every name systemd derives --------------------------

@pytest.mark.parametrize("name", ["qwen\n", "\nqwen", "qw\nen", "-qwen", "_x", "q.w", "../etc", "q٣", "", None, 7])
def test_a_name_that_is_not_a_whole_unit_instance_name_is_refused(name):
    errors = one_line(mod.instance_errors([inst(name, [1], 30001)]))
    assert errors[0].startswith(f"instance name {name!r}: use letters, digits, '-' and '_' only"), errors


def test_a_name_longer_than_the_limit_is_refused_naming_the_limit():
    assert mod.instance_errors([inst("q" * 64, [1], 30001)]) == []
    errors = mod.instance_errors([inst("q" * 65, [1], 30001)])
    assert errors == [f"instance name {'q' * 16}... is 65 characters: the limit is 64 (systemd derives file names "
                      "of at most 255 bytes from sglang-dflash@<name>.service)"]


def test_the_name_limit_fits_what_systemd_derives_from_the_unit_name():
    unit = f"sglang-dflash@{'q' * mod.NAME_MAX}.service"
    assert len(unit + ".d") <= 255  # the drop-in directory
    assert len(f"systemd-private-{'0' * 32}-{unit}-XXXXXX") <= 255  # PrivateTmp's directory
    assert len(f"{'q' * mod.NAME_MAX}.env.4194304.2026-12-01@10:31:33~") <= 255  # the env file's backup


def test_errors_about_a_bad_name_stay_on_one_line():
    errors = mod.instance_errors([inst("a\n", [1], 30001), inst("a\n", [1], 30001)])
    one_line(errors)
    assert "instance name 'a\\n' is used twice: names must be unique" in errors
    assert "port 30001 is assigned to 'a\\n' and 'a\\n': give each instance its own port" in errors


# --- ports and GPUs: converted once, every check compares ints --------------------------------------

def test_instances_typed_converts_digits_once_and_leaves_the_rest():
    typed = mod.instances_typed([inst("a", ["1", 2], "30001", num_draft_tokens="16"),
                                 inst("b", ["x"], "30o01"), inst("c", [True], True)])
    assert typed[0]["port"] == 30001 and typed[0]["gpus"] == [1, 2] and typed[0]["num_draft_tokens"] == 16
    assert typed[1]["port"] == "30o01" and typed[1]["gpus"] == ["x"]
    assert typed[2]["port"] is True and typed[2]["gpus"] == [True]


def test_instances_typed_puts_each_instance_over_the_defaults_shallowly():
    defaults = {"state": "present", "num_draft_tokens": "16", "environment": {"A": "1"}, "extra_args": []}
    typed = mod.instances_typed([inst("a", [1], 30001, environment={"B": "2"}), inst("b", [2], 30002, state="absent"),
                                 "not an instance"], defaults)
    assert typed[0]["state"] == "present" and typed[0]["num_draft_tokens"] == 16
    assert typed[0]["environment"] == {"B": "2"}  # the instance's own mapping replaces the default, as combine does
    assert typed[1]["state"] == "absent" and typed[1]["extra_args"] == []
    assert typed[2] == "not an instance"  # left for instance_errors to name
    assert defaults == {"state": "present", "num_draft_tokens": "16", "environment": {"A": "1"}, "extra_args": []}
    assert mod.instances_typed(None, defaults) == [] and mod.instances_typed([{"name": "x"}], None) == [{"name": "x"}]


def test_a_port_given_as_a_string_is_checked_like_an_int():
    errors = mod.instance_errors([inst("a", [1], 30001), inst("b", [2], "30001")])
    assert errors == ["port 30001 is assigned to a and b: give each instance its own port"]
    assert mod.instance_errors([inst("a", [1], "0")]) == ["instance a: port 0 is out of range (1-65535)"]


@pytest.mark.parametrize("port", ["30o01", "30001 ", 30001.0, True, "-1", [30001]])
def test_a_port_that_is_not_an_integer_is_refused(port):
    errors = mod.instance_errors([inst("a", [1], port)])
    assert errors == [f"instance a: port {port!r} is not an integer: give the port as a number, e.g. 30001"]


def test_a_gpu_given_as_a_string_is_shared_like_an_int():
    errors = mod.instance_errors([inst("a", [1], 30001), inst("b", ["1"], 30002)])
    assert errors == ["GPU 1 is assigned to a and b: give each instance its own GPUs"]


@pytest.mark.parametrize(("gpus", "error"), [
    (["x"], "instance a: GPU 'x' in gpus is not an index: give the GPU indexes nvidia-smi lists, as numbers"),
    ([True], "instance a: GPU True in gpus is not an index: give the GPU indexes nvidia-smi lists, as numbers"),
    ([-1], "instance a: GPU -1 in gpus is not an index: give the GPU indexes nvidia-smi lists, as numbers"),
    ("1", "instance a: gpus '1' is not a list: give GPU indexes, e.g. gpus: [1]"),
    ([1, "1"], "instance a: GPU 1 is listed twice in gpus"),
])
def test_gpus_that_are_not_indexes_are_refused(gpus, error):
    assert mod.instance_errors([inst("a", gpus, 30001)]) == [error]


def test_num_draft_tokens_must_be_a_positive_integer():
    assert mod.instance_errors([inst("a", [1], 30001, num_draft_tokens="16")]) == []
    assert mod.instance_errors([inst("a", [1], 30001, num_draft_tokens=0)]) == [
        "instance a: num_draft_tokens 0 is not a positive integer"]


# --- values that reach the env file ------------------------------------------------------------------

NEWLINE = "holds a newline: an env file value must be one line (it would start a line of its own)"


@pytest.mark.parametrize(("bad", "why"), [
    ("a\nLD_PRELOAD=/tmp/x.so", NEWLINE),
    ("\nSGLANG_API_KEY=", NEWLINE),
    ("a\rb", "holds a carriage return: an env file value must be one line (it would start a line of its own)"),
    ("a\0b", "holds a NUL byte: an env file value must be one line (it would start a line of its own)"),
    ("C:\\", "ends in a backslash, which joins the next line in an env file: remove it"),
    ("\ud800", "is not valid UTF-8 text (systemd ignores such a line)"),
    (["a"], "is a list: give a string or a number"),
    ("x" * 200000, "is 200000 bytes, more than the 65536 an env file value may have here (the kernel refuses to "
                   "start a process with a larger one): keep it in a file and name the file"),
])
def test_an_environment_value_that_is_not_one_line_is_refused_without_showing_it(bad, why):
    errors = one_line(mod.instance_errors([inst("a", [1], 30001, environment={"X_NOTE": bad})],
                                          environment={"GLOBAL": bad}))
    assert errors == [f"sglang_service_environment GLOBAL {why}", f"instance a: environment X_NOTE {why}"]
    assert not any(str(bad) in e for e in errors if str(bad).strip("\\"))


@pytest.mark.parametrize("key", ["BAD KEY", "1X", "X-Y", "X=Y", "", "X\n", "Ä", 5])
def test_an_environment_key_that_is_not_a_variable_name_is_refused(key):
    errors = one_line(mod.instance_errors([inst("a", [1], 30001, environment={key: "v"})]))
    assert errors == [f"instance a: environment: key {key!r} is not a variable name: use letters, digits and '_', "
                      "not starting with a digit (systemd ignores any other line of an env file)"]


def test_an_environment_key_the_role_writes_itself_is_refused():
    errors = mod.instance_errors([inst("a", [1], 30001, environment={"SGLANG_API_KEY": "", "PATH": "/x"})],
                                 environment={"CUDA_VISIBLE_DEVICES": "0"})
    assert errors == [
        "sglang_service_environment sets CUDA_VISIBLE_DEVICES, which the role writes itself: set gpus instead",
        "instance a: environment sets SGLANG_API_KEY, which the role writes itself: set api_key instead",
        "instance a: environment sets PATH, which the role writes itself: set sglang_service_path instead"]


def test_environment_values_with_quotes_dollars_and_percent_are_accepted():
    value = "%h $(id) `id` 'q\" \\ 100%"
    assert mod.instance_errors([inst("a", [1], 30001, environment={"PCT": value, "N": 3, "E": ""})],
                               environment={"NCCL_DEBUG": "INFO"}) == []


@pytest.mark.parametrize("key", ["model_path", "draft_model_path", "served_model_name", "host",
                                 "speculative_algorithm", "attention_backend"])
def test_each_templated_instance_value_must_be_one_line(key):
    errors = mod.instance_errors([inst("a", [1], 30001, **{key: "x\nSGLANG_PORT=22"})])
    assert errors == [f"instance a: {key} holds a newline: an env file value must be one line "
                      "(it would start a line of its own)"]


@pytest.mark.parametrize(("args", "error"), [
    (["--disable-cuda-graph\nINJECTED=1"], "instance a: extra_args[0] holds a newline: an env file value must be one "
                                           "line (it would start a line of its own)"),
    (["--x", "a\\"], "instance a: extra_args[1] ends in a backslash, which joins the next line in an env file: "
                     "remove it"),
    (["--tp 2"], "instance a: extra_args[0] holds whitespace, which the launcher splits on: give each argument as "
                 "its own item"),
    ([""], "instance a: extra_args[0] is empty or not a string: give each server argument as its own non-empty string"),
    ("--x", "instance a: extra_args is a str: give a list, one argument per item"),
])
def test_extra_args_items_are_single_words_on_one_line(args, error):
    assert mod.instance_errors([inst("a", [1], 30001, extra_args=args)]) == [error]


@pytest.mark.parametrize("key", ["k\u2028SGLANG_PORT=1", "clé-é", "two words", "tab\tkey", "\u00a0nbsp"])
def test_an_api_key_an_http_header_cannot_carry_is_refused_without_showing_it(key):
    """Round 3's m1: a key outside Latin-1 (U+2028) was written and restarted, then readiness crashed."""
    errors = mod.instance_errors([inst("a", [1], 30001)], api_keys={"a": key})
    assert errors == ["instance a: api_key holds a space, a control character or a character outside ASCII: give "
                      "printable ASCII (it travels in an HTTP header)"]
    assert mod.instance_errors([inst("a", [1], 30001)], api_keys={"a": "sk-Abc_123.~!$%"}) == []


def test_an_api_key_with_a_newline_is_refused_without_showing_it():
    errors = mod.instance_errors([inst("a", [1], 30001)], api_keys={"a": "sk-secret\nX=1", "b": None})
    assert errors == ["instance a: api_key holds a newline: an env file value must be one line "
                      "(it would start a line of its own)"]


# --- the role's own values ------------------------------------------------------------------------------

def test_role_settings_that_the_unit_names_must_be_plain_paths_and_names():
    good = {"sglang_service_base_dir": "/opt/dflash", "sglang_service_state_dir": "/var/lib/dflash",
            "sglang_service_user": "sglang", "sglang_service_group": "sglang",
            "sglang_service_cuda_home": "/usr/local/cuda", "sglang_service_path": "/usr/bin:/bin"}
    assert mod.setting_errors(good) == []
    errors = one_line(mod.setting_errors({
        "sglang_service_cache_dir": "/var/cache/%i", "sglang_service_base_dir": "opt/dflash",
        "sglang_service_config_dir": "/etc/df lash", "sglang_service_state_dir": "/var/lib/../../root",
        "sglang_service_user": "sg lang", "sglang_service_path": "/usr/bin\nLD_PRELOAD=/x"}))
    assert errors == [
        "sglang_service_cache_dir '/var/cache/%i': give an absolute path of letters, digits and . _ + - / only "
        "(the unit and the launcher name it; systemd would expand % and $ in it)",
        "sglang_service_base_dir 'opt/dflash': give an absolute path of letters, digits and . _ + - / only "
        "(the unit and the launcher name it; systemd would expand % and $ in it)",
        "sglang_service_config_dir '/etc/df lash': give an absolute path of letters, digits and . _ + - / only "
        "(the unit and the launcher name it; systemd would expand % and $ in it)",
        "sglang_service_state_dir '/var/lib/../../root': give an absolute path of letters, digits and . _ + - / only "
        "(the unit and the launcher name it; systemd would expand % and $ in it)",
        "sglang_service_user 'sg lang': give a user or group name of letters, digits, '_', '.' and '-'",
        "sglang_service_path holds a newline: an env file value must be one line (it would start a line of its own)"]


# --- quoting ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "quoted"), [
    ("plain", '"plain"'),
    ("", '""'),
    (None, '""'),
    (30001, '"30001"'),
    ("a b  c ", '"a b  c "'),
    ('say "hi"', '"say \\"hi\\""'),
    ("C:\\srv\\bin", '"C:\\\\srv\\\\bin"'),
    ("$(id) ${HOME} `id`", '"\\$(id) \\${HOME} \\`id\\`"'),
    ("%h %i 100%", '"%h %i 100%"'),
    ("'single'", "\"'single'\""),
    ("#not a comment", '"#not a comment"'),
])
def test_systemd_env_quote(value, quoted):
    assert mod.systemd_env_quote(value) == quoted


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\0b"])
def test_systemd_env_quote_refuses_what_cannot_be_one_line(value):
    with pytest.raises(ValueError, match="cannot be one env file line"):
        mod.systemd_env_quote(value)


VALUES = ["plain", "", "a b  c ", 'say "hi"', "C:\\srv\\bin", "tail\\\\", "$(id) ${HOME} $$ `id`", "%h %i",
          "'q\" \\ x", "#x", ";x", " lead", "=x=y", "\\n\\t\\x41", "ünïcode ✓"]


def _unquote_like_systemd(text):
    """systemd's env-file parser (src/basic/env-file.c, 241 and later) for one KEY="..." line."""
    key, _eq, rest = text.partition("=")
    assert rest[0] == '"' and rest[-1] == '"'
    out, escape = [], False
    for c in rest[1:-1]:
        if escape:
            out.append(c if c in '"\\`$' else "\\" + c)
            escape = False
        elif c == "\\":
            escape = True
        else:
            assert c != '"', "an unescaped quote would end the value early"
            out.append(c)
    assert not escape
    return key, "".join(out)


@pytest.mark.parametrize("value", VALUES)
def test_quoted_values_read_back_as_systemd_reads_them(value):
    assert _unquote_like_systemd("K=" + mod.systemd_env_quote(value)) == ("K", value)


@pytest.mark.skipif(not shutil.which("sh"), reason="no POSIX shell")
def test_quoted_values_read_back_the_same_in_a_posix_shell(tmp_path):
    """The env file is also POSIX sh: sourcing it gives the values systemd gives the server."""
    env_file = tmp_path / "x.env"
    env_file.write_text("".join(f"V{i}={mod.systemd_env_quote(v)}\n" for i, v in enumerate(VALUES)))
    script = 'set -a; . "$1"; ' + "; ".join(f'printf "%s\\0" "$V{i}"' for i in range(len(VALUES)))
    out = subprocess.run(["sh", "-c", script, "_", str(env_file)], capture_output=True, check=True,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert out.stdout.decode().split("\0")[:-1] == VALUES


def test_surge_gpus_and_port_are_checked_like_an_instance_s_and_against_every_other():
    solo = inst("solo", [4], 30004, surge={"gpus": [5], "port": 30005})
    assert mod.instance_errors([solo, inst("q1", [1], 30001)]) == []
    assert mod.instance_errors([solo, inst("q1", [5], 30005)]) == [
        "port 30005 is assigned to q1 and solo's surge: give each instance its own port",
        "GPU 5 is assigned to q1 and solo's surge: give each instance its own GPUs"]
    assert mod.instance_errors([inst("solo", [4], 30004, surge={"gpus": [4], "port": 30004})]) == [
        "port 30004 is assigned to solo and solo's surge: give each instance its own port",
        "GPU 4 is assigned to solo and solo's surge: give each instance its own GPUs"]
    assert mod.instance_errors([inst("solo", [4], 30004, surge={"gpus": "five", "port": 70000, "x": 1})]) == [
        "instance solo: surge has x: it takes gpus and port only",
        "instance solo: surge port 70000 is out of range (1-65535)",
        "instance solo: surge gpus 'five' is not a list: give GPU indexes, e.g. gpus: [1]"]
    assert mod.instance_errors([inst("solo", [4], 30004, surge={"gpus": [5]})]) == [
        "instance solo: surge needs gpus and port (the spare GPUs and the port its surge worker uses)"]
    assert mod.instance_errors([inst("solo", [4], 30004, surge=[5])]) == [
        "instance solo: surge is a list: give {gpus: [...], port: N}"]
    # an absent instance's surge frees what it named
    assert mod.instance_errors([inst("gone", [5], 30005, state="absent", surge={"gpus": [6], "port": 30006}),
                                inst("q1", [6], 30006)]) == []


def test_a_surge_worker_is_the_instance_on_its_surge_gpus_and_port_under_a_name_no_instance_can_have():
    solo = inst("solo", ["4"], "30004", surge={"gpus": ["5"], "port": "30005"}, environment={"A": "1"})
    (worker,) = mod.surge_workers([solo, inst("q1", [1], 30001)])
    assert worker["name"] == "solo.surge" and worker["surge_of"] == "solo"
    assert worker["gpus"] == [5] and worker["port"] == 30005 and "surge" not in worker
    assert worker["environment"] == {"A": "1"} and worker["model_path"] == solo["model_path"]
    assert mod.name_error("solo.surge") is not None   # an instance can never be named so
    assert mod.surge_workers([solo], ["q1"]) == [] and mod.surge_workers([solo], ["solo"]) == [worker]
    assert mod.surge_workers([inst("q1", [1], 30001)]) == []


def _slurped(path, text):
    import base64
    return {"source": path, "content": base64.b64encode(text.encode()).decode(), "item": {"path": path}}


def test_a_surge_worker_left_by_an_interrupted_run_is_described_by_its_own_env_file():
    # the instance moved its surge since (GPU 6, port 30006): the leftover still runs on 5 and 30005
    solo = inst("solo", [4], 30004, surge={"gpus": [6], "port": 30006})
    env = ('SGLANG_PORT="30005"\nSGLANG_SERVED_MODEL_NAME="qwen3-8b-solo"\nCUDA_VISIBLE_DEVICES="5"\n'
           'SGLANG_HOST="127.0.0.1"\nSGLANG_API_KEY="k\\$y"\n')
    (left,) = mod.surge_leftovers([_slurped("/etc/dflash/solo.surge.env", env),
                                   _slurped("/etc/dflash/solo.env", 'SGLANG_PORT="30004"\n')], [solo])
    assert left["name"] == "solo.surge" and left["surge_of"] == "solo" and left["state"] == "present"
    assert left["port"] == 30005 and left["gpus"] == [5] and left["served_model_name"] == "qwen3-8b-solo"
    assert left["model_path"] == solo["model_path"] and "surge" not in left


def test_a_leftover_of_an_instance_no_longer_listed_is_still_taken_down():
    env = _slurped("/etc/dflash/gone.surge.env", 'SGLANG_PORT=30007\nSGLANG_SERVED_MODEL_NAME=m\n')
    (left,) = mod.surge_leftovers([env], [inst("q1", [1], 30001)])
    described = (left["name"], left["surge_of"], left["port"], left["served_model_name"])
    assert described == ("gone.surge", "gone", 30007, "m")
    assert mod.surge_leftovers([], [inst("q1", [1], 30001)]) == []


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "127.0.0.1", "::0"])
def test_a_host_that_takes_loopback_connections_is_accepted(host):
    assert mod.instance_errors([inst("a", [1], 30001, host=host)]) == []


@pytest.mark.parametrize("host", ["10.89.64.201", "::1", "127.0.0.2", "gpu-host.internal", "localhost"])
def test_a_host_the_probes_cannot_reach_on_loopback_is_refused(host):
    """Round 3, N7: the probes go to 127.0.0.1; an instance bound elsewhere leaves that port to any local
    user (who then got the key) and never answers there."""
    assert mod.instance_errors([inst("a", [1], 30001, host=host)]) == [
        f"instance a: host {host} does not take connections to 127.0.0.1, where the deploy probes the instance "
        "(readiness, the performance gate, the fast path): give 0.0.0.0 (every address; keep the port behind a "
        "firewall), :: or 127.0.0.1"]
