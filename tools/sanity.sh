#!/usr/bin/env bash
# ansible-test sanity without Docker. ansible-test needs the collection at
# .../ansible_collections/dflash/deploy, so copy what the collection ships
# (tracked and unignored files minus galaxy.yml's build_ignore: the test
# fixtures, benchmarks and dev tools are not part of the collection) there
# and run it locally with per-test virtual environments. The pip bootstrap
# those venvs need is the offline stand-in (tools/pip_standin.sh).
#
# SANITY_VENV: the venv whose ansible-test (and so whose ansible-core) runs
# the tests, and whose Python is the controller's; default .venv (make sanity).
# make test-matrix (tools/test_matrix.sh) points it at each line's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${SANITY_VENV:-.venv}
case $venv in /*) ;; *) venv=$root/$venv ;; esac
[ -x "$venv/bin/ansible-test" ] || { echo "sanity: no ansible-test in $venv" >&2; exit 1; }
bash tools/pip_standin.sh "$venv/bin/python"
# Outside the checkout: inside it, ansible-test would find this repo's .git,
# ask git for the file list, and skip everything under the ignored copy.
# One directory per run, so concurrent runs (two checkouts, CI beside a dev
# shell) never clobber each other; removed afterwards.
work=$(mktemp -d "${TMPDIR:-/tmp}/dflash-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/dflash/deploy
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | "$venv/bin/python" -c '
import fnmatch, sys, yaml
ignore = yaml.safe_load(open("galaxy.yml"))["build_ignore"]
for path in sys.stdin.read().split("\0"):
    if not path:
        continue
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    if any(fnmatch.fnmatch(p, pat) for p in prefixes for pat in ignore):
        continue
    sys.stdout.write(path + "\0")
' | while IFS= read -r -d '' f; do
  [ -e "$f" ] || [ -L "$f" ] || continue   # deleted in the work tree, not yet in git
  mkdir -p "$dest/$(dirname "$f")"
  cp -P "$f" "$dest/$f"
done

# The modules' Python versions on the managed host: tests/config.yml's
# python_requires (what their `requirements` claim, plugins/doc_fragments/
# venv_reader.py), as far as this ansible-test supports them. Every sanity test
# on the controller's version (the venv's Python), then the tests that depend
# on the target's version (compile, import) on each other one. Interpreters
# come from PATH or pyenv's versions; a version with no interpreter is an
# error, not a skip. SANITY_TARGET_PYTHONS replaces the computed list.
read -r CONTROLLER COMPUTED_TARGETS < <("$venv/bin/python" - <<'PY'
import sys
import yaml
from packaging.specifiers import SpecifierSet
from ansible_test._util.target.common.constants import CONTROLLER_PYTHON_VERSIONS, REMOTE_ONLY_PYTHON_VERSIONS
claimed = SpecifierSet(yaml.safe_load(open("tests/config.yml"))["modules"]["python_requires"])
controller = "%d.%d" % sys.version_info[:2]
targets = [v for v in REMOTE_ONLY_PYTHON_VERSIONS + CONTROLLER_PYTHON_VERSIONS if v in claimed and v != controller]
print(controller, " ".join(targets))
PY
)
[ -n "${CONTROLLER:-}" ] || { echo "sanity: could not read the Python versions from $venv and tests/config.yml" >&2; exit 1; }
TARGET_PYTHONS=${SANITY_TARGET_PYTHONS:-$COMPUTED_TARGETS}
echo "sanity: ansible-core $("$venv/bin/python" -c 'from ansible.release import __version__; print(__version__)'); controller Python $CONTROLLER; compile and import also on: $TARGET_PYTHONS"
pybin=$work/pythons
mkdir -p "$pybin"
for v in $TARGET_PYTHONS; do
  exe=""
  if "python$v" -c '' >/dev/null 2>&1; then
    exe=$(command -v "python$v")
  else
    for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
      [ -x "$cand" ] && exe=$cand
    done
  fi
  if [ -z "$exe" ]; then
    echo "sanity: no python$v for the target tests (set SANITY_TARGET_PYTHONS to the versions you have)" >&2
    exit 1
  fi
  ln -sfn "$exe" "$pybin/python$v"
done
export PATH=$pybin:$PATH

cd "$dest"
"$venv/bin/ansible-test" sanity --venv --python "$CONTROLLER" --color no "$@"
[ $# -eq 0 ] || exit 0   # a chosen test (tools/sanity.sh --test pep8) runs on the controller's version only
for v in $TARGET_PYTHONS; do
  "$venv/bin/ansible-test" sanity --venv --python "$v" --color no --test compile --test import
done
