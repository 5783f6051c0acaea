"""The house rules (docs/architecture.md "House rules") hold the shape of the collection, and each fails on
a deliberately broken copy: role task files at most 120 lines, no Jinja statement in role YAML or
playbooks, no Jinja block over 6 lines, no role reading another role's private facts, no include cycle
between roles, no role over 1,000 task lines, no chain of included task files deeper than 4 below a playbook,
no plugin importing another plugin type, every filter documented for ansible-doc, no command
task on a host running a program by a bare name.

What broke a rule when it became a test is listed in house_rules_exceptions.yml, which may only shrink:
a new offender, or a listed one that grew, fails; so does a listed one that no longer breaks the rule as
much as listed (lower the entry, or remove it)."""
from __future__ import annotations

import shutil
from pathlib import Path

import house_rules as H
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXCEPTIONS = yaml.safe_load((Path(__file__).parent / "house_rules_exceptions.yml").read_text())


@pytest.mark.parametrize("rule", sorted(H.RULES))
def test_the_tree_keeps_the_house_rule(rule):
    found, allowed = H.RULES[rule](REPO), EXCEPTIONS.get(rule) or {}
    assert H.breaches(found, allowed) == [], "house rule %s broken (docs/architecture.md)" % rule
    assert H.stale(found, allowed) == [], "tests/unit/house_rules_exceptions.yml: %s lists less than it may" % rule


@pytest.fixture
def copy(tmp_path):
    """A copy of the parts of the tree the rules read, to break on purpose."""
    for part in ("roles", "playbooks", "plugins"):
        shutil.copytree(REPO / part, tmp_path / part, symlinks=True)
    return tmp_path


def broken(copy, rule):
    return H.breaches(H.RULES[rule](copy), EXCEPTIONS.get(rule) or {})


def test_a_task_file_over_120_lines_breaks_it(copy):
    path = copy / "roles" / "host_lock" / "tasks" / "main.yml"
    path.write_text(path.read_text() + "# padding\n" * 121)
    assert broken(copy, "task_file_lines") == ["roles/host_lock/tasks/main.yml (%d, allowed 0)"
                                               % len(path.read_text().splitlines())]


def test_a_jinja_statement_or_a_long_block_breaks_it(copy):
    path = copy / "roles" / "host_lock" / "tasks" / "release.yml"
    block = "\n".join(["- name: A decision in Jinja", "  ansible.builtin.set_fact:", "    x: >-",
                       "      {% for i in range(3) %}{{ i }}{% endfor %}"] + ["      {{ 1 }}"] * 6) + "\n"
    path.write_text(path.read_text() + block)
    assert broken(copy, "jinja_statements") == ["roles/host_lock/tasks/release.yml (1, allowed 0)"]
    assert broken(copy, "long_jinja_blocks") == ["roles/host_lock/tasks/release.yml (1, allowed 0)"]


def test_reading_another_roles_private_fact_breaks_it(copy):
    path = copy / "roles" / "host_lock" / "tasks" / "release.yml"
    path.write_text(path.read_text() + "- name: Peek\n  ansible.builtin.debug:\n    var: _deploy_state_unrecordable\n")
    assert broken(copy, "foreign_private_facts") == [
        "roles/host_lock/tasks/release.yml: _deploy_state_unrecordable (1, allowed 0)"]


def test_an_include_cycle_breaks_it(copy):
    """The rollout includes the service's entry points (trust, surge_files); the service calling the rollout back
    (as it did before the rollout was a role of its own) is a cycle. A role named in a comment is not an include."""
    path = copy / "roles" / "sglang_service" / "tasks" / "absent.yml"
    path.write_text(path.read_text() + "# dflash.deploy.rollout restarts what the switch named\n")
    assert broken(copy, "include_cycles") == []
    path.write_text(path.read_text() + "- name: Back\n  block:\n    - name: In a block\n"
                                       "      ansible.builtin.include_role:\n"
                                       "        name: dflash.deploy.rollout\n        tasks_from: check\n")
    assert broken(copy, "include_cycles") == ["rollout -> sglang_service -> rollout (2, allowed 0)"]


def test_a_deeper_include_or_a_bigger_role_breaks_it(copy):
    """One more level below the deepest chains (the service's trust.yml, four below either playbook: the switch's
    and the roll-back's) and a role whose task files pass 1,000 lines."""
    path = copy / "roles" / "sglang_service" / "tasks" / "trust.yml"
    path.write_text(path.read_text() + "- name: Deeper\n  ansible.builtin.import_tasks: settings.yml\n")
    assert broken(copy, "include_depth") == ["playbooks/deploy_dflash.yml (5, allowed 0)",
                                             "playbooks/rollback.yml (5, allowed 0)"]
    tasks = copy / "roles" / "host_lock" / "tasks"
    for n in range(9):
        (tasks / ("pad%d.yml" % n)).write_text("---\n" + "# padding\n" * 119)
    lines = sum(len(p.read_text().splitlines()) for p in tasks.glob("*.yml"))
    assert lines > 1000
    assert broken(copy, "role_task_lines") == ["roles/host_lock (%d, allowed 0)" % lines]


def test_a_plugin_importing_another_plugin_type_breaks_it(copy):
    path = copy / "plugins" / "filter" / "gpus.py"
    path.write_text(path.read_text() + "\nfrom ansible_collections.dflash.deploy.plugins.action import bundle_push\n")
    assert broken(copy, "cross_plugin_imports") == ["plugins/filter/gpus.py: action (1, allowed 0)"]


def test_an_undocumented_filter_breaks_it(copy):
    path = copy / "plugins" / "filter" / "gpus.py"
    text = path.read_text().replace("def filters(self):\n        return {", "def filters(self):\n        return {\n"
                                    "            'gpu_new_thing': len,", 1)
    assert text != path.read_text()
    path.write_text(text)
    assert broken(copy, "undocumented_filters") == ["gpu_new_thing (1, allowed 0)"]
    sidecar = path.parent / "gpu_new_thing.yml"
    sidecar.write_text("DOCUMENTATION:\n  name: gpu_new_thing\n  short_description: x: y\nRETURN: {}\n")
    assert broken(copy, "undocumented_filters") == ["gpu_new_thing (1, allowed 0)"]  # does not parse
    sidecar.write_text("DOCUMENTATION:\n  name: gpu_new_thing\n  short_description: Count\nRETURN: {}\n")
    assert broken(copy, "undocumented_filters") == []


def test_a_program_run_by_a_bare_name_on_a_host_breaks_it(copy):
    """Round 3's N1 as a rule: a command task on a host names its program by absolute path (or a variable that
    holds one); root's PATH never chooses it. The controller's own commands (delegate_to: localhost) are not
    root's on a host."""
    path = copy / "roles" / "host_lock" / "tasks" / "release.yml"
    path.write_text(path.read_text() + """
- name: Read the journal
  ansible.builtin.command:
    argv: [journalctl, -u, x]
- name: Show a unit
  ansible.builtin.command:
    argv: >-
      {{ ['systemctl', 'show'] + units }}
- name: A block
  block:
    - name: Unpack
      ansible.builtin.command: tar -xf x.tar
    - name: On the controller
      ansible.builtin.command:
        cmd: tar -xf y.tar
      delegate_to: localhost
    - name: By absolute path and by a variable
      ansible.builtin.command:
        argv: ["{{ uv_path }}", pip, freeze]
""")
    assert broken(copy, "bare_program_names") == [
        "roles/host_lock/tasks/release.yml: journalctl (1, allowed 0)",
        "roles/host_lock/tasks/release.yml: systemctl (1, allowed 0)",
        "roles/host_lock/tasks/release.yml: tar (1, allowed 0)"]
