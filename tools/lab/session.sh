#!/usr/bin/env bash
# Run a command against the lab, holding the lab's lock for the whole of it:
# bring the lab up, run the command, and take the lab down afterwards unless it
# was already up (and this checkout's) before. `make lab-test` and `make
# molecule` use it, so a CI run and a developer's scenario never interleave.
#   tools/lab/session.sh .venv/bin/pytest -q tests/lab
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${DFLASH_LAB_SESSION:-}" ]; then
  export DFLASH_LAB_SESSION=1
  exec tools/lab/exclusive "$0" "$@"
fi
lab=(.venv/bin/python tools/lab/lab.py)
was_up=0
"${lab[@]}" status >/dev/null 2>&1 && was_up=1
status=0
"${lab[@]}" up && "$@" || status=$?
[ "$was_up" = 1 ] || "${lab[@]}" down || true
exit "$status"
