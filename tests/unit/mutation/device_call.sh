#!/bin/bash
# `make mutate` on a bigger machine, the device side (docs/testing.md, "The 16- and 32-core machines"):
# unpack what build/devrun carries, make the toolchain venv's stand-in, run device_run.py.
#   bash tests/unit/mutation/device_call.sh OUT DEADLINE_S WORKERS name ...
set -e
D=build/devrun
rm -rf $D/mutants && mkdir -p $D/mutants && tar -xzf $D/mutants.tar.gz -C $D/mutants
gunzip -c $D/uv.gz > /tmp/uv && chmod +x /tmp/uv
export DFLASH_UV=/tmp/uv
# .venv there: a venv holding the carried packages and pip (test_real_metadata.py reads a real venv), and an
# `ansible` that runs the adhoc CLI on this interpreter with the carried ansible-core (test_through_ansible_cli)
if [ ! -x /tmp/dvenv/bin/python ]; then
  python3 -m venv --without-pip /tmp/dvenv || /tmp/uv venv -q -p python3 /tmp/dvenv
  SP=$(/tmp/dvenv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp -a $D/site/. "$SP"/
  PIP=$(python3 -c 'import os, pip; print(os.path.dirname(pip.__file__))')
  cp -a "$PIP" "$(dirname "$PIP")"/pip-*.dist-info "$SP"/
  PY=$(command -v python3)
  printf '#!/bin/sh\nPYTHONPATH=%s exec %s -c "import sys; sys.argv[0] = \\"ansible\\"; from ansible.cli.adhoc import main; sys.exit(main())" "$@"\n' \
    "$PWD/$D/site" "$PY" > /tmp/dvenv/bin/ansible
  chmod +x /tmp/dvenv/bin/ansible
fi
export DEVRUN_VENV=/tmp/dvenv PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8
out=$1; shift
python3 tests/unit/mutation/device_run.py "$out" "$@"
