"""pydist/wheel_tags.py: a dist's WHEEL tags against the destination interpreter."""

from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.wheel_tags import (
    check_tags,
    expand_tag,
    tag_compatible,
)

PY311 = (3, 11)


@pytest.mark.parametrize("tag,ok", [
    ("py3-none-any", True),
    ("py2.py3-none-any", True),
    ("cp311-cp311-linux_x86_64", True),
    ("cp311-cp311-manylinux_2_28_x86_64", True),
    ("cp311-cp311-manylinux2014_x86_64", True),
    ("cp312-cp312-manylinux_2_28_x86_64", False),
    ("cp310-cp310-manylinux_2_28_x86_64", False),
    ("cp39-abi3-manylinux_2_28_x86_64", True),
    ("cp312-abi3-manylinux_2_28_x86_64", False),
    ("cp311-cp311-manylinux_2_28_aarch64", False),
    ("cp311-cp311t-manylinux_2_28_x86_64", False),
    ("pp310-pypy310_pp73-manylinux_2_28_x86_64", False),
    ("cp311-cp311-win_amd64", False),
    ("py2-none-any", False),
    ("garbage", False),
])
def test_tag_compatible(tag, ok):
    assert tag_compatible(tag, PY311, machine="x86_64") is ok


def test_freethreaded():
    assert tag_compatible("cp313-cp313t-manylinux_2_28_x86_64", (3, 13), True, machine="x86_64")
    assert not tag_compatible("cp313-cp313-manylinux_2_28_x86_64", (3, 13), True, machine="x86_64")
    assert not tag_compatible("cp39-abi3-linux_x86_64", (3, 13), True, machine="x86_64")


def test_check_tags_reason():
    assert check_tags([], PY311) is None
    assert check_tags(["cp312-cp312-linux_x86_64", "py3-none-any"], PY311, machine="x86_64") is None
    reason = check_tags(["cp312-cp312-manylinux_2_28_x86_64"], PY311, machine="x86_64")
    assert "cp312-cp312" in reason and "CPython 3.11" in reason


def test_expand():
    assert expand_tag("py2.py3-none-any") == [("py2", "none", "any"), ("py3", "none", "any")]
    assert expand_tag("bad") == []
