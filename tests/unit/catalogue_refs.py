"""What a row of docs/reliability.md or docs/security.md names as its proof, and the checks that it
exists and that `make test` runs it (used by test_reliability_catalogue.py and test_security_catalogue.py).

The last cell of a row names one or more assertions, each in backticks:

- `faults: "port taken by another service"`: in the molecule scenario `faults`, a task, or a case of a
  looped include (a list item with `name:`), whose `name:` is exactly the quoted text, in a file the
  scenario runs (its molecule.yml's playbooks and the files they include from the scenario's directory).
  A name written with `{{ … }}` in the file matches when each templated part is a value the scenario's
  files hold (`host_failure: "The kill left this phase unfinished at build"` for
  `The kill left this phase unfinished at {{ _point }}` with `_point: build`). Plays and tasks that
  cannot fail (debug, set_fact) do not count. The scenario must be in the
  Makefile's MOLECULE_SCENARIOS or MOLECULE_TWIN_DEFAULT (make molecule's two streams).
- `test_transplant_crash.py::test_kill9_at_random_moments`: a test function (a glob such as `test_08_*`
  allowed) defined in that file; a bare file name is looked up under tests/, and the file must sit under
  a directory one of `make test`'s pytest stages runs. A bare `test_…` names one more test in the file
  named before it in the same cell.

A scenario or a file alone names no assertion and is refused.
"""
from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = REPO / "Makefile"
MOLECULE = REPO / "extensions" / "molecule"

SCENARIO_REF = re.compile(r'(?P<scenario>[a-z][a-z0-9_]*): "(?P<name>[^"]+)"')
INCLUDES = {"include_tasks", "import_tasks", "import_playbook",
            "ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "ansible.builtin.import_playbook"}
CANNOT_FAIL = {"debug", "set_fact", "ansible.builtin.debug", "ansible.builtin.set_fact"}
# molecule's stages and the playbook each runs (idempotence runs converge again)
STAGE_PLAYBOOK = {"create": "create", "prepare": "prepare", "converge": "converge", "idempotence": "converge",
                  "side_effect": "side_effect", "verify": "verify", "cleanup": "cleanup", "destroy": "destroy"}
DEFAULT_SEQUENCE = ["create", "prepare", "converge", "idempotence", "side_effect", "verify", "cleanup", "destroy"]


def table_rows(page: Path, first_cell: str):
    """(first cell, case, last cell) of each table row whose first cell fully matches first_cell."""
    rows = []
    for line in page.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 2 and re.fullmatch(first_cell, cells[0]):
            rows.append((cells[0], cells[1], cells[-1]))
    return rows


def make_variable(name):
    text = MAKEFILE.read_text().replace("\\\n", " ")
    match = re.search(rf"^{name}\s*[?:]?=\s*(.*)$", text, re.M)
    assert match, f"Makefile has no {name}"
    return match.group(1).split()


def make_test_pytest_dirs():
    """The directories the pytest stages of `make test` run (`pytest -q tests/…`)."""
    dirs = []
    # a stage a+b runs lanes at once, a lane x,y its targets in order, ~x under nice (tools/run_stages.sh): each runs
    todo = [t for group in make_variable("TEST_STAGES") for t in group.replace("~", "").replace(",", "+").split("+")]
    text, seen = MAKEFILE.read_text(), set()
    while todo:
        stage = todo.pop()
        recipe = re.search(rf"^{re.escape(stage)}:.*\n((?:\t.*\n)+)", text, re.M)
        if stage in seen or not recipe:
            continue
        seen.add(stage)
        dirs += re.findall(r"pytest -q (tests/[\w/]+)", recipe.group(1))
        # a recipe that runs other targets ($(MAKE) … lab-test molecule, as lab-suite does) runs theirs too
        for call in re.findall(r"\$\(MAKE\)([^&;'\n]*)", recipe.group(1)):
            todo += [w for w in call.split() if not w.startswith("-") and re.search(rf"^{re.escape(w)}:", text, re.M)]
    return sorted(set(dirs))


def scenarios():
    return sorted(p.parent.name for p in MOLECULE.glob("*/molecule.yml"))


def scenario_files(scenario):
    """The YAML files of the scenario's directory that its test sequence runs: its stages' playbooks and
    what they include from that directory (playbooks shared from elsewhere are not the scenario's)."""
    root = (MOLECULE / scenario).resolve()
    config = yaml.safe_load((root / "molecule.yml").read_text()) or {}
    shared = yaml.safe_load((MOLECULE / "config.yml").read_text()) or {}  # what `make molecule` merges under it
    playbooks = {**((shared.get("provisioner") or {}).get("playbooks") or {}),
                 **((config.get("provisioner") or {}).get("playbooks") or {})}
    sequence = ((config.get("scenario") or {}).get("test_sequence")
                or (shared.get("scenario") or {}).get("test_sequence") or DEFAULT_SEQUENCE)
    todo = []
    for stage in sequence:
        if stage in STAGE_PLAYBOOK:
            kind = STAGE_PLAYBOOK[stage]
            todo.append((root / playbooks.get(kind, f"{kind}.yml")).resolve())
    seen = []
    while todo:
        path = todo.pop()
        if path in seen or root not in path.parents or not path.is_file():
            continue
        seen.append(path)
        for target in _includes(yaml.safe_load(path.read_text())):
            if "{{" not in target:
                todo += [(path.parent / target).resolve(), (root / target).resolve()]
    return sorted(seen)


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _includes(doc):
    for node in _walk(doc):
        for key in INCLUDES & set(node):
            target = node[key]
            target = target.get("file") if isinstance(target, dict) else target
            if isinstance(target, str):
                yield target


def _scalars(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from _scalars(value)
    elif isinstance(node, list):
        for item in node:
            yield from _scalars(item)
    elif isinstance(node, (str, int)):
        yield str(node)


def scenario_assertions(scenario):
    """(names of the scenario's tasks and cases that can fail, every scalar value its files hold)."""
    names, values = set(), set()
    for path in scenario_files(scenario):
        doc = yaml.safe_load(path.read_text())
        values.update(_scalars(doc))
        for node in _walk(doc):
            name = node.get("name")
            if isinstance(name, str) and "hosts" not in node and not CANNOT_FAIL & set(node):
                names.add(name)
    return names, values


def name_matches(written, named, values):
    """Whether a name as written in a file (perhaps templated) is the name a row gives."""
    if written == named:
        return True
    parts = re.split(r"\{\{.*?\}\}", written)
    if len(parts) == 1:
        return False
    match = re.fullmatch("(.+?)".join(re.escape(p) for p in parts), named)
    return bool(match) and all(g in values for g in match.groups())


def defined_tests(path):
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test")}


def find_test_file(file_part):
    candidate = REPO / file_part
    if not candidate.exists() and "/" not in file_part:
        found = sorted((REPO / "tests").rglob(file_part))
        assert len(found) == 1, f"{file_part}: {len(found)} files of that name under tests/"
        candidate = found[0]
    return candidate


def check_cell(row, cell):
    """Assert that each backticked reference of the cell names an assertion that exists and runs;
    returns how many it names."""
    refs = re.findall(r"`([^`]+)`", cell)
    assert refs, f"{row} names no assertion in backticks: {cell!r}"
    molecule = set(make_variable("MOLECULE_SCENARIOS")) | set(make_variable("MOLECULE_TWIN_DEFAULT"))
    pytest_dirs = [REPO / d for d in make_test_pytest_dirs()]
    current = None
    for ref in refs:
        scenario_ref = SCENARIO_REF.fullmatch(ref)
        if scenario_ref:
            scenario, name = scenario_ref.group("scenario", "name")
            assert scenario in scenarios(), f"{row}: no molecule scenario {scenario!r} ({scenarios()})"
            assert scenario in molecule, \
                f"{row}: scenario {scenario} is not in MOLECULE_SCENARIOS or MOLECULE_TWIN_DEFAULT"
            names, values = scenario_assertions(scenario)
            assert any(name_matches(n, name, values) for n in names), \
                f"{row}: no task or case named {name!r} in the files scenario {scenario} runs"
            continue
        file_part, sep, func = ref.partition("::")
        if file_part.startswith("test_") and not file_part.endswith(".py"):
            assert current is not None, f"{row}: {ref}: a test name with no file named before it"
            func = ref
        else:
            assert sep and func, (f"{row}: `{ref}` names no assertion: write `scenario: \"task or case name\"` "
                                  "or `file.py::test_name`")
            current = find_test_file(file_part)
            assert current.is_file(), f"{row}: {file_part} is not a file"
            assert any(d in current.parents for d in pytest_dirs), \
                f"{row}: {file_part} is not under a directory make test runs ({make_test_pytest_dirs()})"
        assert fnmatch.filter(defined_tests(current), func), f"{row}: no test {func} in {current.relative_to(REPO)}"
    return len(refs)
