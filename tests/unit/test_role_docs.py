"""Each role README's variables section is its meta/argument_specs.yml (tools/role_docs.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_role_readmes_match_their_argument_specs():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "role_docs.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_spec_variable_is_in_its_readme():
    import yaml
    for spec_file in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        readme = (spec_file.parent.parent / "README.md").read_text()
        for entry in yaml.safe_load(spec_file.read_text())["argument_specs"].values():
            for name in entry.get("options") or {}:
                assert f"`{name}`" in readme, (spec_file, name)
