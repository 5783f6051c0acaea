"""dflash_tree/info.py: what a tree declares (version, requirements)."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree import info as I
from dflash_tree_support import REAL_METADATA_HEAD, REAL_UNDERSCORE_VERSION_PY, REAL_VERSION_PY


def test_the_tree_declares_its_requirements(tmp_path):
    src = tmp_path / "src"
    (src / "python" / "sglang").mkdir(parents=True)
    (src / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.11"\n')
    (src / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\nversion = "0.5.11"\ndependencies = ["sglang-kernel==0.4.2", "torch==2.11.0"]\n')
    info = I.tree_info(str(src), "python/sglang")
    assert info.version == "0.5.11" and list(info.requires) == ["sglang-kernel==0.4.2", "torch==2.11.0"]
    assert info.declared_in == str(src / "python" / "pyproject.toml")
    (src / "python" / "pyproject.toml").unlink()
    (src / "python" / "METADATA").write_text(REAL_METADATA_HEAD + "Requires-Dist: torch==2.11.0\n\nbody\n")
    info = I.tree_info(str(src), "python/sglang")
    assert list(info.requires) == ["torch==2.11.0"]
    (src / "python" / "METADATA").unlink()
    with pytest.raises(I.TreeInfoError, match="declares no requirements") as exc:
        I.tree_info(str(src), "python/sglang")
    assert str(exc.value) == (
        "the DFlash tree %s/python/sglang declares no requirements (%s/python/pyproject.toml or %s/python/METADATA): "
        "capture it with playbooks/stage_artifacts.yml, or use a checkout" % (src, src, src))


def test_the_version_is_read_from_underscore_version_first(tmp_path):
    """Real sglang 0.5.11's version.py imports _version.py and holds only an indented fallback (0.0.0.dev0)."""
    pkg = tmp_path / "python" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "version.py").write_text(REAL_VERSION_PY)
    (tmp_path / "python" / "pyproject.toml").write_text('[project]\nversion = "9.9"\ndependencies = []\n')
    assert I.tree_info(str(tmp_path), "python/sglang").version == "9.9"  # no literal: the declared one
    (pkg / "_version.py").write_text(REAL_UNDERSCORE_VERSION_PY)
    info = I.tree_info(str(tmp_path), "python/sglang/")
    assert info.version == "0.5.11" and info.declared_version == "9.9" and info.requires == ()


def test_a_broken_declaration_is_named(tmp_path):
    (tmp_path / "python" / "sglang").mkdir(parents=True)
    (tmp_path / "python" / "pyproject.toml").write_text("[project\n")
    with pytest.raises(I.TreeInfoError, match="pyproject.toml is not TOML"):
        I.tree_info(str(tmp_path), "python/sglang")
    (tmp_path / "python" / "pyproject.toml").write_text('[project]\ndependencies = "torch"\n')
    with pytest.raises(I.TreeInfoError, match="not a list of strings"):
        I.tree_info(str(tmp_path), "python/sglang")
