"""The router's launcher (roles/sglang_router/files/sglang_router_launch.py, installed as
<base>/bin/sglang-router-launch): launch_router gets the control-plane key from the environment inside the
interpreter, never on the command line, and the router is not started without one (round 3, N5). The real
router started through it is tests/unit/plugins/modules/test_router_workers_real.py's."""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[2] / "roles" / "sglang_router" / "files" / "sglang_router_launch.py"
_spec = importlib.util.spec_from_file_location("dflash_router_launch", LAUNCHER)
launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launch)
KEY = "rt3-launch-K3y"  # noqa: S105 - a test key


@pytest.fixture
def fake_router(monkeypatch):
    """A stand-in sglang_router.launch_router that records what it was given."""
    seen = {}
    module = types.ModuleType("sglang_router.launch_router")
    module.parse_router_args = lambda args: ("parsed", list(args))
    module.launch_router = lambda parsed: seen.setdefault("launched", parsed)
    monkeypatch.setitem(sys.modules, "sglang_router", types.ModuleType("sglang_router"))
    monkeypatch.setitem(sys.modules, "sglang_router.launch_router", module)
    return seen


def test_the_key_joins_the_arguments_inside_the_interpreter_and_leaves_the_environment(fake_router):
    environ = {"SGLANG_ROUTER_CONTROL_PLANE_API_KEY": KEY, "PATH": "/usr/bin"}
    argv = ["--host", "127.0.0.1", "--port", "30100"]
    launch.main(list(argv), environ)
    assert fake_router["launched"] == ("parsed", argv + [
        "--control-plane-api-keys", "dflash-deploy:dflash.deploy:admin:" + KEY])
    assert environ == {"PATH": "/usr/bin"}  # nothing the router starts inherits it
    assert argv == ["--host", "127.0.0.1", "--port", "30100"]


@pytest.mark.parametrize("environ", [{}, {"SGLANG_ROUTER_CONTROL_PLANE_API_KEY": ""},
                                     {"SGLANG_ROUTER_CONTROL_PLANE_API_KEY": "two words"}])
def test_without_a_usable_key_the_router_is_not_started(fake_router, environ):
    with pytest.raises(SystemExit) as exc:
        launch.main(["--host", "0.0.0.0"], dict(environ))
    assert str(exc.value).startswith("sglang-router-launch: no usable SGLANG_ROUTER_CONTROL_PLANE_API_KEY in the "
                                     "environment")
    assert "two words" not in str(exc.value) and "launched" not in fake_router
