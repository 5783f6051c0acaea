#!/usr/bin/env bash
# ansible-test's pip bootstrap, offline: ansible-test looks for
# ~/.ansible/test/cache/get_pip_<pip version>.py before downloading get-pip.py,
# so put tools/get_pip_standin.py there under the name that the ansible-test
# of the given interpreter asks for (each ansible-core pins its own pip).
#   tools/pip_standin.sh .venv/bin/python
# `make setup` runs it for .venv, tools/sanity.sh for the venv it tests with.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:?usage: tools/pip_standin.sh PYTHON}
pipver=$("$python" - <<'PY'
import re, pathlib, ansible_test
root = pathlib.Path(ansible_test.__file__).parent
src = (root / "_internal" / "python_requirements.py").read_text()
m = re.search(r"pip='([0-9.]+)'", src)
print(m.group(1).replace(".", "_") if m else "")
PY
)
[ -n "$pipver" ] || exit 0
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
# written aside and renamed: two makes running setup at once never see a half file or a clash
install -m 0644 tools/get_pip_standin.py "$cache/.get_pip_${pipver}.py.$$"
mv -f "$cache/.get_pip_${pipver}.py.$$" "$cache/get_pip_${pipver}.py"
