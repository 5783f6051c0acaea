#!/usr/bin/env bash
# make setup: idempotent toolchain bootstrap.
#  - uv (pinned) into .tools/uv, using the system Python's pip once;
#  - .venv with the pinned toolchain from requirements/toolchain.txt, on Python
#    $TOOLCHAIN_PYTHON (ansible-core 2.21 wants 3.12 or newer on the controller);
#  - .collections/ansible_collections/dflash/deploy -> the checkout, so
#    ansible, ansible-doc and ansible-playbook resolve dflash.deploy from here;
#  - the offline stand-in for ansible-test's get-pip bootstrap.
# A second run with unchanged pins does no network work (stamp file).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
UV_VERSION=0.13.9
TOOLCHAIN_PYTHON=3.12
PY=$(bash tools/find_python.sh "$TOOLCHAIN_PYTHON")
if [ -z "$PY" ]; then
  echo "setup: no Python $TOOLCHAIN_PYTHON interpreter found (set PYTHON to one)" >&2
  exit 2
fi
UV=$ROOT/.tools/uv/bin/uv

if [ ! -x "$UV" ] || [ "$("$UV" --version 2>/dev/null | awk '{print $2}')" != "$UV_VERSION" ]; then
  echo "setup: installing uv $UV_VERSION into .tools/uv"
  rm -rf .tools/uv
  "$PY" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target .tools/uv "uv==$UV_VERSION"
fi

stamp=.venv/.toolchain.sha256
# "bytecode": the venv is installed with its bytecode compiled (below); a venv made before that is synced again.
want="$(sha256sum requirements/toolchain.txt | awk '{print $1}') bytecode"
# A .venv on another Python (an older checkout's) is made again, not patched.
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$TOOLCHAIN_PYTHON')"; then
  echo "setup: .venv is not on Python $TOOLCHAIN_PYTHON: making it again"
  rm -rf .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv ($PY) and installing requirements/toolchain.txt"
  [ -x .venv/bin/python ] || "$UV" venv --quiet --python "$PY" .venv
  # --compile-bytecode: every interpreter of the toolchain (each ansible-playbook, molecule, pytest, ansible-lint and
  # the lab's controller) imports .pyc files instead of compiling its sources again: where PYTHONDONTWRITEBYTECODE
  # is set, as on CI's machines, nothing else ever writes them. A trivial playbook: 2.8 s of CPU without, 1.5 s with.
  "$UV" pip sync --quiet --compile-bytecode --python .venv/bin/python requirements/toolchain.txt
  echo "$want" > "$stamp"
else
  echo "setup: .venv matches requirements/toolchain.txt (no network needed)"
fi

# Collection resolution from the checkout (ansible.cfg: collections_path = .collections)
mkdir -p .collections/ansible_collections/dflash
ln -sfn ../../.. .collections/ansible_collections/dflash/deploy

# The lab's inventory, ansible.cfg's default (inventory/lab.yml: this checkout's absolute paths, so not committed):
# written once here so that it exists before the lab first comes up; `lab.py up` writes it again for the hosts it runs.
[ -f inventory/lab.yml ] || .venv/bin/python -c 'import sys; sys.path.insert(0, "tools/lab")
from hosts import hosts; from inventory_file import write_inventory; write_inventory(hosts(0, 0))'

# ansible-test's pip bootstrap, offline (HOST-NOTES.md): the stand-in under the
# name this ansible-test looks for before downloading get-pip.py.
bash tools/pip_standin.sh .venv/bin/python
echo "setup: done (ansible-core $(.venv/bin/python -c 'from ansible.release import __version__; print(__version__)'), $(.venv/bin/python -V))"
