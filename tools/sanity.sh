#!/usr/bin/env bash
# ansible-test sanity without Docker. ansible-test needs the collection at
# .../ansible_collections/dflash/deploy, so copy what the collection ships
# (tracked and unignored files minus galaxy.yml's build_ignore: the test
# fixtures, benchmarks and dev tools are not part of the collection) there
# and run it locally with per-test virtual environments. The pip bootstrap
# those venvs need is the offline stand-in that `make setup` installs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# Outside the checkout: inside it, ansible-test would find this repo's .git,
# ask git for the file list, and skip everything under the ignored copy.
# One directory per run, so concurrent runs (two checkouts, CI beside a dev
# shell) never clobber each other; removed afterwards.
work=$(mktemp -d "${TMPDIR:-/tmp}/dflash-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/dflash/deploy
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | .venv/bin/python -c '
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

# The modules claim Python 3.8 to 3.13 on the managed host (their `requirements`,
# plugins/doc_fragments/venv_reader.py): every sanity test on the controller's
# 3.11, then the tests that depend on the target's version (compile, import) on
# each other claimed version. Interpreters come from PATH or pyenv's versions;
# a claimed version with no interpreter is an error, not a skip.
TARGET_PYTHONS=${SANITY_TARGET_PYTHONS:-3.8 3.9 3.10 3.12 3.13}
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
"$root/.venv/bin/ansible-test" sanity --venv --python 3.11 --color no "$@"
[ $# -eq 0 ] || exit 0   # a chosen test (tools/sanity.sh --test pep8) runs on 3.11 only
for v in $TARGET_PYTHONS; do
  "$root/.venv/bin/ansible-test" sanity --venv --python "$v" --color no --test compile --test import
done
