"""The markdown link check of `make collection` (tools/collection_check.py): what counts as a link, what resolves.

`make collection` runs ``dead_links`` on the installed copy, so a shipped page that links to a page the
tarball leaves out (galaxy.yml's build_ignore) fails it. The same check holds the source tree's pages here."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("collection_check", REPO / "tools" / "collection_check.py")
check = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(check)


def test_inline_image_reference_and_angle_links_are_found_in_order():
    text = ('See [the design](docs/architecture.md), ![a plot](img/p.png "title"), [a dir](modules/),\n'
            "[with anchor](testing.md#the-lab) and [spaces](<my page.md>) and [parens](a_(b).md).\n\n"
            "[ref]: ../roles/x/README.md\n")
    assert check.md_links(text) == ["docs/architecture.md", "img/p.png", "modules/", "testing.md#the-lab",
                                    "my page.md", "a_(b).md", "../roles/x/README.md"]


def test_urls_code_blocks_and_code_spans_hold_no_link():
    text = ("[site](https://example.org/x.md) [mail](mailto:a@example.org) [proto](//example.org/y)\n"
            "`[not](a-code-span.md)` and ``[nor](this `one`.md)``\n\n"
            "```sh\n[fenced](fenced.md)\n```\n"
            "~~~\n[tilde](tilde.md)\n~~~\n"
            "[same page](#usage) [kept](kept.md)\n")
    assert check.md_links(text) == ["#usage", "kept.md"]


def test_a_stray_backtick_does_not_hide_the_next_paragraph():
    text = "a lone ` backtick\n\n[after](after.md) and `x`\n"
    assert check.md_links(text) == ["after.md"]


def test_heading_anchors_as_github_makes_them():
    text = ("# dflash.deploy\n## The 16- and 32-core machines\n## `make test` (the README's test command)\n"
            "## Notes\n## Notes\n### See [the lab](lab.md) ##\n```\n# not a heading\n```\n")
    assert check.md_anchors(text) == {"dflashdeploy", "the-16--and-32-core-machines",
                                      "make-test-the-readmes-test-command", "notes", "notes-1", "see-the-lab"}


def test_dead_links_names_each_missing_file_escape_and_heading(tmp_path):
    (tmp_path / "docs" / "modules").mkdir(parents=True)
    (tmp_path / "docs" / "modules" / "a.md").write_text("# A\n## Options\n")
    (tmp_path / "README.md").write_text("[a](docs/modules/a.md#options) [dir](docs/modules/) [top](#usage)\n## Usage\n"
                                        "[gone](docs/lab.md) [up](../outside.md) [bad](docs/modules/a.md#nope)\n")
    (tmp_path.parent / "outside.md").write_text("# outside\n")
    assert check.dead_links(tmp_path) == ["README.md: docs/lab.md (no such file)",
                                          "README.md: ../outside.md (outside the collection)",
                                          "README.md: docs/modules/a.md#nope (no such heading)"]
    (tmp_path / "docs" / "lab.md").write_text("# Lab\n")
    assert len(check.dead_links(tmp_path)) == 2


def test_every_link_of_the_source_tree_resolves_in_it():
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    files = [REPO / f for f in listed.stdout.split()]
    assert len(files) > 30
    assert check.dead_links(REPO, files) == []


def test_the_lab_inventories_and_changelog_fragments_do_not_ship():
    shipped = ["README.md", "inventory/production.example.yml", "changelogs/changelog.yaml",
               "inventory/twin.yml", "inventory/lab2.yml", "changelogs/fragments/27-no-playbook-dir-defaults.yml",
               "docs/development.md", "docs/architecture.md"]
    problems = check.check_contents(shipped)
    assert [p for p in problems if p.startswith("ships ")] == [
        "ships inventory/twin.yml", "ships inventory/lab2.yml",
        "ships changelogs/fragments/27-no-playbook-dir-defaults.yml", "ships docs/development.md"]


def test_galaxy_build_ignore_keeps_them_out():
    import yaml
    ignored = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
    assert {"inventory/twin.yml", "changelogs/fragments", "docs/development.md"} <= set(ignored)


def test_a_shipped_file_that_only_the_checkouts_ansible_lint_config_re_kinds_is_refused(tmp_path):
    config = tmp_path / ".ansible-lint"
    config.write_text('kinds:\n  - yaml: "**/changelogs/fragments/*.yml"\n')
    names = ["changelogs/changelog.yaml", "changelogs/fragments/27-no-playbook-dir-defaults.yml", "playbooks/a.yml"]
    assert check.relinted(names, config) == [
        "ships changelogs/fragments/27-no-playbook-dir-defaults.yml, which ansible-lint reads as yaml only through "
        "the checkout's .ansible-lint"]
    assert check.relinted(names[:1] + names[2:], config) == []
    assert check.relinted(names[1:2]), "the checkout's own .ansible-lint re-kinds the fragments"
