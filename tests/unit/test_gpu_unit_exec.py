# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/gpu/unit_exec.py starts a unit's ExecStart on a GPU host without systemd: its variables must
become the words systemd would make of them (the router's unit passes its workers as one $VAR)."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "unit_exec", Path(__file__).resolve().parents[1] / "gpu" / "unit_exec.py")
unit_exec = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(unit_exec)


def test_a_bare_variable_becomes_one_word_per_whitespace_part():
    argv = ["python", "--worker-urls", "$URLS", "--policy", "round_robin"]
    env = {"URLS": "http://127.0.0.1:30001  http://127.0.0.1:30002"}
    assert unit_exec.expand_env_words(argv, env) == [
        "python", "--worker-urls", "http://127.0.0.1:30001", "http://127.0.0.1:30002", "--policy", "round_robin"]


def test_an_empty_or_unset_bare_variable_leaves_no_word():
    assert unit_exec.expand_env_words(["a", "$EMPTY", "$UNSET", "b"], {"EMPTY": ""}) == ["a", "b"]


def test_a_braced_variable_stays_inside_its_word():
    env = {"PORT": "30001", "HOST": "a b"}
    assert unit_exec.expand_env_words(["--bind=${HOST}:${PORT}"], env) == ["--bind=a b:30001"]
