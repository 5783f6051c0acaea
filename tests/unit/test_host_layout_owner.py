"""The host layout has one owner, roles/host_layout (defaults only): no role task, role default,
handler, template or playbook spells its paths, so moving the layout is one variable."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
OWNER = REPO / "roles" / "host_layout"
LAYOUT_PATHS = ("/opt/dflash", "/etc/dflash", "/var/lib/dflash", "/var/cache/dflash")
USES = re.compile(r"\bhost_layout_[a-z_]+")


def product_files():
    globs = ("roles/*/tasks/*.yml", "roles/*/defaults/*.yml", "roles/*/handlers/*.yml", "roles/*/templates/*",
             "playbooks/**/*.yml")
    return sorted(p for g in globs for p in REPO.glob(g) if OWNER not in p.parents)


def code(text):
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


def spelled(lines):
    # /opt/dflash but not /opt/dflash-fixture-driver or /opt/dflashx
    return [line for line in lines if any(re.search(re.escape(p) + r"(?![\w.-])", line) for p in LAYOUT_PATHS)]


def test_no_role_task_default_or_playbook_spells_the_host_layout():
    offenders = {str(p.relative_to(REPO)): spelled(code(p.read_text())) for p in product_files()}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_a_spelled_path_and_not_a_comment_or_a_longer_name():
    assert spelled(["    base_dir: /opt/dflash", "x: '/var/cache/dflash/a'"]) == [
        "    base_dir: /opt/dflash", "x: '/var/cache/dflash/a'"]
    assert spelled(["install -d /opt/dflash-fixture-driver", "base_dir: '{{ host_layout_base_dir }}'"]) == []
    assert code("# the layout lives under /opt/dflash\nx: 1\n") == ["x: 1"]


def test_the_owner_names_each_path_once_and_its_spec_agrees():
    defaults = yaml.safe_load((OWNER / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((OWNER / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    # a literal default is spelled in the spec too; a derived one ("{{ ... }}") is described there instead
    literal = {k: None if "{{" in str(v) else v for k, v in defaults.items()}
    assert {k: v.get("default") for k, v in spec.items()} == literal
    assert sorted(p for p in defaults.values() if p.startswith("/")) == sorted(LAYOUT_PATHS)
    # defaults only as a dependency (a dependency runs tasks/main.yml, and there is none): it does nothing but
    # name; its one entry point, tasks/path.yml, runs only where a playbook asks for it
    assert not (OWNER / "tasks" / "main.yml").exists()
    assert sorted(p.name for p in (OWNER / "tasks").glob("*")) == ["path.yml"]


def test_every_role_that_reads_the_layout_depends_on_its_owner():
    for role in sorted(p for p in (REPO / "roles").iterdir() if p.is_dir() and p != OWNER):
        files = [p for p in role.glob("*/*.yml") if p.parent.name in ("tasks", "defaults")]
        text = "\n".join("\n".join(code(p.read_text())) for p in files)
        if not USES.search(text):
            continue
        deps = yaml.safe_load((role / "meta" / "main.yml").read_text()).get("dependencies") or []
        names = [d["role"] if isinstance(d, dict) else d for d in deps]
        assert "dflash.deploy.host_layout" in names, role.name


def _includes_owner_first(path):
    plays = yaml.safe_load(path.read_text())
    tasks = plays[0]["tasks"] if "hosts" in plays[0] else plays
    return (tasks[0].get("ansible.builtin.include_role") or {}) == {"name": "dflash.deploy.host_layout", "public": True}


def _importers(path):
    """The playbook files that import or include the task file ``path`` by its name (inline, or as ``file:``)."""
    return [other for other in sorted(REPO.glob("playbooks/**/*.yml"))
            if other != path and re.search(r"(import|include)_tasks:(?:\s*\n\s*file:)?.*\b%s\b" % re.escape(path.name),
                                           "\n".join(code(other.read_text())))]


def test_every_playbook_that_reads_the_layout_includes_its_owner_public_first():
    # a task file only ever imported by files that include the owner first reads it through them
    for path in sorted(REPO.glob("playbooks/**/*.yml")):
        if not USES.search("\n".join(code(path.read_text()))):
            continue
        importers = _importers(path)
        if path.parent.name == "tasks" and importers and all(_includes_owner_first(i) for i in importers):
            continue
        assert _includes_owner_first(path), path


def defaults_reading_the_source(root: Path) -> dict:
    """Role defaults (outside the owner) that read the collection-wide ``dflash_source`` themselves: {file: [lines]}."""
    out = {}
    for path in sorted(root.glob("roles/*/defaults/*.yml")):
        if OWNER.name == path.parent.parent.name:
            continue
        lines = [line for line in code(path.read_text()) if re.search(r"\bdflash_source\b", line)]
        if lines:
            out[str(path.relative_to(root))] = lines
    return out


def test_where_dflash_comes_from_is_defaulted_once_by_the_owner_and_each_role_reads_it():
    assert defaults_reading_the_source(REPO) == {}
    defaults = yaml.safe_load((OWNER / "defaults" / "main.yml").read_text())
    assert defaults["host_layout_dflash_source"] == "{{ dflash_source | default('upstream') }}"
    for role in ("dflash_overlay", "sglang_venv", "sglang_service"):
        role_defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
        assert role_defaults[f"{role}_dflash_source"] == "{{ host_layout_dflash_source }}", role


def test_the_source_check_sees_a_role_default_that_copies_the_collection_wide_default(tmp_path):
    (tmp_path / "roles" / "kernel_pin" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "kernel_pin" / "defaults" / "main.yml").write_text(
        "# where dflash_source is set\nkernel_pin_dflash_source: \"{{ dflash_source | default('upstream') }}\"\n")
    line = "kernel_pin_dflash_source: \"{{ dflash_source | default('upstream') }}\""
    assert defaults_reading_the_source(tmp_path) == {"roles/kernel_pin/defaults/main.yml": [line]}
