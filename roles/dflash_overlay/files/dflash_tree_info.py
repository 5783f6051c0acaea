# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a DFlash-capable sglang tree declares, read from the tree itself (on the controller).

usage: dflash_tree_info.py SOURCE_DIR PACKAGE_SUBDIR  -> JSON on stdout:
  {"version": <the tree's sglang/version.py>, "requires": [...], "declared_in": <file>}
The requirements come from the tree's own declaration beside the package
(PACKAGE_SUBDIR's parent): pyproject.toml's [project] dependencies (a checkout,
or what capture_dflash_sources.py writes), else a METADATA file's Requires-Dist.
A tree that declares nothing is refused (exit 1): no list is kept by hand.
"""

import email.parser
import json
import os
import re
import sys

VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)


def tree_version(pkg_dir):
    """A top-level literal in sglang/_version.py (a built sglang, 0.5.11 on), else in sglang/version.py."""
    for name in ("_version.py", "version.py"):
        try:
            with open(os.path.join(pkg_dir, name), encoding="utf-8") as fh:
                match = VERSION_RE.search(fh.read())
        except OSError:
            continue
        if match:
            return match.group(1)
    return None


def from_pyproject(path):
    import tomllib  # Python 3.11+, as ansible-core 2.19's controller

    with open(path, "rb") as fh:
        project = tomllib.load(fh).get("project", {})
    return project.get("version"), list(project.get("dependencies", []))


def from_metadata(path):
    """Version and Requires-Dist, read as the email headers METADATA is (core metadata spec): a field may
    continue over indented lines, some whitespace only (real sglang 0.5.11's License); only a truly empty
    line ends the headers."""
    with open(path, encoding="utf-8") as fh:
        headers = email.parser.HeaderParser().parse(fh)
    return headers.get("Version"), [str(r).strip() for r in headers.get_all("Requires-Dist", [])]


def main(argv):
    source, subdir = argv[1], argv[2]
    pkg_dir = os.path.join(source, subdir)
    base = os.path.dirname(pkg_dir.rstrip("/"))
    for name, reader in (("pyproject.toml", from_pyproject), ("METADATA", from_metadata)):
        path = os.path.join(base, name)
        if os.path.isfile(path):
            declared, requires = reader(path)
            version = tree_version(pkg_dir) or declared
            print(json.dumps({"version": version, "declared_version": declared, "requires": requires,
                              "declared_in": path}))
            return 0
    print("the DFlash tree %s declares no requirements (%s/pyproject.toml or %s/METADATA): capture it with "
          "playbooks/stage_artifacts.yml, or use a checkout" % (pkg_dir, base, base), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
