#!/usr/bin/env bash
# tools/find_python.sh VERSION: print the path of a CPython VERSION (e.g. 3.12) interpreter,
# or nothing. Tried in order: $PYTHON when it is that version, pythonVERSION on the PATH,
# the newest pyenv build of it ($PYENV_ROOT or ~/.pyenv: pyenv's shims do not answer for a
# version that is not the global one). Used by tools/setup.sh and tools/test_matrix.sh.
set -uo pipefail
want=${1:?usage: tools/find_python.sh VERSION}
is_version() { "$1" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$want')" >/dev/null 2>&1; }
for cand in "${PYTHON:-}" "python$want"; do
  if [ -n "$cand" ] && is_version "$cand"; then
    "$cand" -c 'import sys; print(sys.executable)'
    exit 0
  fi
done
for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/"python$want"; do
  [ -x "$cand" ] && is_version "$cand" && echo "$cand"
done | sort -V | tail -n 1
