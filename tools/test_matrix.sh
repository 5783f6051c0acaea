#!/usr/bin/env bash
# make test-matrix: the collection on each supported ansible-core line, with
# controller Python 3.12, each line in its own venv (build/matrix/<line>/venv,
# from requirements/matrix-<line>.txt). The development toolchain (.venv) is
# not used for any step that tests the collection. Per line, in order:
#   venv    made with uv when missing or when its pins changed (stamp file);
#   unit    pytest tests/unit with the line's interpreter (the tests that run
#           ansible, ansible-doc or ansible-playbook take the ones beside it);
#   sanity  tools/sanity.sh with SANITY_VENV=<the line's venv>: the line's
#           ansible-test, controller tests on 3.12, compile and import on the
#           modules' other Python versions that this ansible-test supports;
#   lab     the `default` molecule scenario in the lab (make molecule with
#           MOLECULE_SCENARIOS=default and the line's venv first on PATH).
# Every step runs even when an earlier one failed (a step whose venv could not
# be made is "not run"); the table at the end has each step's result and time,
# and the exit status is non-zero when any step failed.
#
#   MATRIX_LINES="2.20"   the lines to test (default: 2.19 2.20 2.21)
#   MATRIX_LAB=0          skip the lab step (no lab, no podman)
#   MATRIX_PYTHON=/path   the controller interpreter (default: python3.12 from
#                         PATH, else pyenv's newest 3.12)
# Each step's output is shown and kept in build/matrix/<line>/<step>.log; the
# table goes to build/matrix/summary.txt as well.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
UV=$ROOT/.tools/uv/bin/uv
LINES=${MATRIX_LINES:-2.19 2.20 2.21}
LAB=${MATRIX_LAB:-1}
PYVER=3.12

PYTHON=${MATRIX_PYTHON:-$(bash tools/find_python.sh "$PYVER")}
if [ -z "$PYTHON" ] || ! "$PYTHON" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$PYVER'" 2>/dev/null; then
  echo "test-matrix: no Python $PYVER interpreter (set MATRIX_PYTHON)" >&2
  exit 2
fi
[ -x "$UV" ] || { echo "test-matrix: $UV missing: run make setup" >&2; exit 2; }

declare -A result elapsed core
STEPS=(venv unit sanity lab)

# make_venv LINE: build/matrix/LINE/venv from requirements/matrix-LINE.txt,
# remade from scratch when the pins or the interpreter changed.
make_venv() {
  local line=$1 venv=build/matrix/$1/venv pins=requirements/matrix-$1.txt want
  [ -f "$pins" ] || { echo "no $pins (compile requirements/matrix-$line.in: make matrix-pins)"; return 1; }
  want="$(sha256sum "$pins" | awk '{print $1}') $PYTHON"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.matrix-pins" 2>/dev/null)" = "$want" ]; then
    echo "$venv matches $pins"
    return 0
  fi
  echo "$venv: creating from $pins with $PYTHON"
  rm -rf "$venv"
  "$UV" venv --quiet --python "$PYTHON" "$venv" &&
    "$UV" pip sync --quiet --compile-bytecode --python "$venv/bin/python" "$pins" &&
    echo "$want" > "$venv/.matrix-pins"
}

step_unit() {
  local venv=$ROOT/build/matrix/$1/venv
  # build/fixtures is .venv's (Python 3.12, as here): its torch wheels are tagged for 3.12 and for
  # the lab hosts' 3.11 (tests/fixtures/native/build_native.py TORCH_TAGS).
  # shellcheck disable=SC2086  # PYTEST_ARGS is a list of arguments
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/unit ${PYTEST_ARGS:-}
}

step_sanity() {
  SANITY_VENV=build/matrix/$1/venv bash tools/sanity.sh
}

step_lab() {
  make --no-print-directory -o setup -o fixtures molecule MOLECULE_SCENARIOS=default \
    MOLECULE_VENV="build/matrix/$1/venv"
}

# run LINE STEP: one step, its output shown and kept in its log, its result and time noted
run() {
  local line=$1 step=$2 t0 rc log=build/matrix/$1/$2.log
  echo "=== test-matrix $line: $step (log: $log)"
  t0=$SECONDS
  "step_$step" "$line" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  elapsed[$line/$step]=$((SECONDS - t0))
  if [ "$rc" -eq 0 ]; then result[$line/$step]=passed; else result[$line/$step]="FAILED ($rc)"; fi
  echo "=== test-matrix $line: $step ${result[$line/$step]} in ${elapsed[$line/$step]} s"
}
step_venv() { make_venv "$1"; }

t_all=$SECONDS
mkdir -p build/matrix
for line in $LINES; do
  mkdir -p "build/matrix/$line"
  run "$line" venv
  if [ "${result[$line/venv]}" != passed ]; then
    for step in unit sanity lab; do result[$line/$step]="not run"; done
    core[$line]=-
    continue
  fi
  core[$line]=$("build/matrix/$line/venv/bin/python" -c 'from ansible.release import __version__; print(__version__)')
  run "$line" unit
  run "$line" sanity
  if [ "$LAB" = 0 ]; then
    result[$line/lab]="skipped"
    echo "=== test-matrix $line: lab skipped (MATRIX_LAB=0)"
  else
    run "$line" lab
  fi
done

status=0
for line in $LINES; do
  for step in "${STEPS[@]}"; do
    case ${result[$line/$step]} in passed|skipped) ;; *) status=1 ;; esac
  done
done
{
  echo "test-matrix: controller Python $("$PYTHON" -c 'import platform; print(platform.python_version())'), $((SECONDS - t_all)) s in all"
  printf '%-6s %-13s' line ansible-core
  for step in "${STEPS[@]}"; do printf ' %-16s' "$step"; done
  echo
  for line in $LINES; do
    printf '%-6s %-13s' "$line" "${core[$line]}"
    for step in "${STEPS[@]}"; do
      cell=${result[$line/$step]}
      [ -n "${elapsed[$line/$step]:-}" ] && cell="$cell ${elapsed[$line/$step]} s"
      printf ' %-16s' "$cell"
    done
    echo
  done
} > build/matrix/summary.txt
echo
cat build/matrix/summary.txt
exit "$status"
