"""The house rules (docs/architecture.md "House rules"), each a function over a checkout that returns what
breaks it: ``{offender: size}``, where an offender is a file, a (file, fact) pair or a name, and the size is
what the rule measures (lines, blocks, reads). tests/unit/test_house_rules.py holds them against the tree
and against deliberately broken copies; tests/unit/house_rules_exceptions.yml lists what broke a rule when
it was written, which may only shrink."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

TASK_FILE_LINES = 120
JINJA_BLOCK_LINES = 6
BLOCK_START = re.compile(r"^(\s*)(?:- )?[\w.\"' -]*:\s*[>|][-+]?\s*(#.*)?$")
ROLE_REF = re.compile(r"\bdflash\.deploy\.([a-z_]+)\b")
PLUGIN_TYPES = ("action", "callback", "filter", "modules", "lookup", "test", "inventory", "connection")


def _rel(root: Path, path: Path) -> str:
    return str(path.relative_to(root))


def roles(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "roles").iterdir() if (p / "meta").is_dir())


def long_task_files(root: Path) -> dict:
    """Role task files over TASK_FILE_LINES lines, with their line count."""
    out = {}
    for path in sorted(root.glob("roles/*/tasks/*.yml")):
        lines = len(path.read_text().splitlines())
        if lines > TASK_FILE_LINES:
            out[_rel(root, path)] = lines
    return out


def _yaml_files(root: Path):
    globs = ("roles/*/tasks/*.yml", "roles/*/defaults/*.yml", "roles/*/vars/*.yml", "roles/*/handlers/*.yml",
             "playbooks/*.yml", "playbooks/tasks/*.yml")
    return sorted(p for g in globs for p in root.glob(g))


def jinja_statements(root: Path) -> dict:
    """Files of role tasks, defaults, vars, handlers and playbooks that hold a Jinja statement (``{%``), with
    how many lines do."""
    out = {}
    for path in _yaml_files(root):
        count = sum(1 for line in path.read_text().splitlines() if "{%" in line and not line.lstrip().startswith("#"))
        if count:
            out[_rel(root, path)] = count
    return out


def block_lengths(text: str):
    """(first line number, lines) of each block scalar (``key: >-``, ``key: |``) that holds Jinja."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = BLOCK_START.match(lines[i])
        i += 1
        if not start:
            continue
        indent, body = len(start.group(1)), []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        if any("{{" in line or "{%" in line for line in body):
            yield i - len(body), len(body)


def long_jinja_blocks(root: Path) -> dict:
    """Files with Jinja blocks over JINJA_BLOCK_LINES lines, with how many such blocks each has."""
    out = {}
    for path in _yaml_files(root):
        count = sum(1 for _line, n in block_lengths(path.read_text()) if n > JINJA_BLOCK_LINES)
        if count:
            out[_rel(root, path)] = count
    return out


def foreign_private_facts(root: Path) -> dict:
    """(role file, fact) pairs where a role reads another role's private fact (``_<role>_…``, ``__<role>_…``),
    with how many lines do."""
    names = roles(root)
    pattern = re.compile(r"\b__?(%s)_[a-z0-9_]+" % "|".join(sorted(names, key=len, reverse=True)))
    out = {}
    for role in names:
        for path in sorted((root / "roles" / role).rglob("*")):
            if not path.is_file() or path.suffix not in (".yml", ".j2"):
                continue
            for line in path.read_text().splitlines():
                if line.lstrip().startswith("#"):
                    continue
                for m in pattern.finditer(line):
                    if m.group(1) != role and not m.group(0).lstrip("_").startswith(role + "_"):
                        key = "%s: %s" % (_rel(root, path), m.group(0))
                        out[key] = out.get(key, 0) + 1
    return out


ROLE_INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role")


def included_roles(items) -> set:
    """The roles a task list includes or imports (include_role/import_role ``name``), blocks opened; a role named
    in a comment or a filter's name is not an include."""
    found = set()
    for task in _tasks(items):
        for key in ROLE_INCLUDES:
            args = task.get(key)
            if isinstance(args, dict):
                found |= set(ROLE_REF.findall(str(args.get("name", ""))))
    return found


def role_graph(root: Path) -> dict:
    """Each role and the roles it includes, imports or depends on."""
    graph = {}
    for role in roles(root):
        found = set()
        base = root / "roles" / role
        for path in list(base.glob("tasks/*.yml")) + list(base.glob("handlers/*.yml")):
            found |= included_roles(yaml.safe_load(path.read_text()))
        meta = base / "meta" / "main.yml"
        if meta.exists():
            for dep in (yaml.safe_load(meta.read_text()) or {}).get("dependencies") or []:
                name = dep.get("role", "") if isinstance(dep, dict) else str(dep)
                found.add(name.rsplit(".", 1)[-1])
        graph[role] = sorted(r for r in found if r != role and (root / "roles" / r).is_dir())
    return graph


def include_cycles(root: Path) -> dict:
    """Each cycle of the role graph, as 'a -> b -> a', with its length."""
    graph, out = role_graph(root), {}

    def walk(node, path):
        for nxt in graph.get(node, []):
            if nxt == path[0]:
                cycle = path + [nxt]
                low = cycle.index(min(cycle[:-1]))
                key = " -> ".join(cycle[low:-1] + cycle[:low] + [cycle[low]])
                out[key] = len(cycle) - 1
            elif nxt not in path:
                walk(nxt, path + [nxt])
    for role in graph:
        walk(role, [role])
    return out


def cross_plugin_imports(root: Path) -> dict:
    """(plugin file, imported plugin type) pairs where a plugin imports another plugin type (module_utils
    and plugin_utils are the shared layers)."""
    out = {}
    for kind in PLUGIN_TYPES:
        for path in sorted((root / "plugins" / kind).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                    [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for name in names:
                    m = re.match(r"ansible_collections\.dflash\.deploy\.plugins\.([a-z_]+)", name)
                    if m and m.group(1) not in (kind, "module_utils", "plugin_utils"):
                        out["%s: %s" % (_rel(root, path), m.group(1))] = 1
    return out


def filter_names(path: Path) -> list[str]:
    """The names a filter file's FilterModule.filters() returns (the dict's string keys)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Dict):
                    return [k.value for k in sub.keys if isinstance(k, ast.Constant)]
    return []


def _documents(text: str, name: str) -> bool:
    """Whether a sidecar's YAML parses and its DOCUMENTATION names the filter, with a description."""
    try:
        doc = (yaml.safe_load(text) or {}).get("DOCUMENTATION") or {}
    except yaml.YAMLError:
        return False
    return doc.get("name") == name and bool(doc.get("short_description")) and "RETURN" in yaml.safe_load(text)


def undocumented_filters(root: Path) -> dict:
    """Filters ``ansible-doc -t filter`` has nothing for: no ``plugins/filter/<name>.yml`` sidecar and no
    DOCUMENTATION in a file of that name."""
    out = {}
    for path in sorted((root / "plugins" / "filter").glob("*.py")):
        for name in filter_names(path):
            sidecar = path.parent / (name + ".yml")
            own = path.parent / (name + ".py")
            if sidecar.exists() and _documents(sidecar.read_text(), name):
                continue
            if own.exists() and "DOCUMENTATION" in own.read_text():
                continue
            out[name] = 1
    return out


COMMAND_MODULES = ("ansible.builtin.command", "command")
FIRST_IN_TEMPLATE = re.compile(r"\{\{\s*\[\s*(?:'([^']*)'|\"([^\"]*)\"|([A-Za-z_][\w.]*))")


def _tasks(items):
    """Every task of a task list, blocks opened (block, rescue, always)."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        for key in ("block", "rescue", "always"):
            yield from _tasks(item.get(key))
        if not any(k in item for k in ("block", "rescue", "always")):
            yield item


def program_of(args):
    """The program a command task's arguments start, as written: '' when a variable names it."""
    if isinstance(args, dict):
        argv, cmd = args.get("argv"), args.get("cmd")
    else:
        argv, cmd = None, args
    if isinstance(argv, list) and argv:
        first = str(argv[0])
    elif isinstance(argv, str):
        m = FIRST_IN_TEMPLATE.search(argv)
        return "" if not m or m.group(3) else (m.group(1) if m.group(1) is not None else m.group(2))
    elif isinstance(cmd, str) and cmd.split():
        first = cmd.split()[0]
    else:
        return ""
    return "" if first.startswith("{{") else first


def bare_program_names(root: Path) -> dict:
    """(file, program) pairs where a role or playbook runs a program by a bare name on a host (a command task
    not delegated to the controller): root's PATH would choose it."""
    out = {}
    for path in _yaml_files(root):
        data = yaml.safe_load(path.read_text()) or []
        plays = data if isinstance(data, list) else []
        tasks = [t for p in plays for key in ("tasks", "pre_tasks", "post_tasks", "handlers")
                 for t in _tasks(p.get(key) if isinstance(p, dict) and "hosts" in p else [])]
        tasks += list(_tasks([p for p in plays if isinstance(p, dict) and "hosts" not in p]))
        for task in tasks:
            module = next((m for m in COMMAND_MODULES if m in task), None)
            if module is None or str(task.get("delegate_to", "")).strip() in ("localhost", "127.0.0.1"):
                continue
            program = program_of(task[module])
            if program and not program.startswith("/"):
                key = "%s: %s" % (_rel(root, path), program)
                out[key] = out.get(key, 0) + 1
    return out


MAX_INCLUDE_DEPTH = 4
MAX_ROLE_TASK_LINES = 1000
TASK_INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "include_tasks", "import_tasks")


def _children(root: Path, items, base: Path) -> list[Path]:
    """The task files a task list includes or imports: its include_tasks/import_tasks files (relative to
    ``base``, the including file's directory) and the entry points of the roles it includes (``tasks_from``, else
    main). A templated name is not followed."""
    out = []
    for task in _tasks(items):
        for key in TASK_INCLUDES:
            args = task.get(key)
            name = args.get("file") if isinstance(args, dict) else args
            if isinstance(name, str) and "{{" not in name:
                out.append(base / name)
        for key in ROLE_INCLUDES:
            args = task.get(key)
            if isinstance(args, dict):
                for role in ROLE_REF.findall(str(args.get("name", ""))):
                    out.append(root / "roles" / role / "tasks" / ("%s.yml" % args.get("tasks_from", "main")))
    return [c for c in out if c.is_file()]


def _depth(root: Path, items, base: Path, seen: tuple) -> int:
    """The longest chain of task files below a task list (a file already on the chain ends it)."""
    return max([1 + _depth(root, yaml.safe_load(c.read_text()) or [], c.parent, seen + (c,))
                for c in _children(root, items, base) if c not in seen] or [0])


def include_depths(root: Path) -> dict:
    """Each playbook whose longest chain of included task files (playbooks/tasks, role entry points and the files
    they include, each import or include one level) is longer than MAX_INCLUDE_DEPTH, with that length."""
    out = {}
    for book in sorted((root / "playbooks").glob("*.yml")):
        tasks = []
        for play in yaml.safe_load(book.read_text()) or []:
            if isinstance(play, dict):
                for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                    tasks += play.get(key) or []
                for role in play.get("roles") or []:
                    name = role.get("role", role.get("name", "")) if isinstance(role, dict) else str(role)
                    tasks.append({"ansible.builtin.include_role": {"name": name}})
        depth = _depth(root, tasks, book.parent, ())
        if depth > MAX_INCLUDE_DEPTH:
            out[_rel(root, book)] = depth
    return out


def role_task_lines(root: Path) -> dict:
    """Each role whose task files hold more than MAX_ROLE_TASK_LINES lines in all, with that count."""
    out = {}
    for role in roles(root):
        lines = sum(len(p.read_text().splitlines()) for p in (root / "roles" / role / "tasks").glob("*.yml"))
        if lines > MAX_ROLE_TASK_LINES:
            out["roles/%s" % role] = lines
    return out


RULES = {
    "task_file_lines": long_task_files,
    "jinja_statements": jinja_statements,
    "long_jinja_blocks": long_jinja_blocks,
    "foreign_private_facts": foreign_private_facts,
    "include_cycles": include_cycles,
    "cross_plugin_imports": cross_plugin_imports,
    "undocumented_filters": undocumented_filters,
    "bare_program_names": bare_program_names,
    "include_depth": include_depths,
    "role_task_lines": role_task_lines,
}


def breaches(found: dict, allowed: dict) -> list[str]:
    """What breaks a rule beyond its exceptions: a new offender, or a known one that grew."""
    return ["%s (%s, allowed %s)" % (k, v, allowed.get(k, 0)) for k, v in sorted(found.items())
            if v > allowed.get(k, 0)]


def stale(found: dict, allowed: dict) -> list[str]:
    """Exceptions that no longer break the rule as listed: they must shrink with the tree."""
    return ["%s (listed %s, now %s)" % (k, v, found.get(k, 0)) for k, v in sorted(allowed.items())
            if found.get(k, 0) < v]
