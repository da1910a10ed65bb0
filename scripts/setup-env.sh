#!/usr/bin/env bash
# Create (or reuse) the virtual environment and install ran_fairseq with its pinned dependencies.
#   VENV=path   where the environment lives (default: .venv in the checkout)
#   PYTHON=exe  the interpreter that creates it (default: python3)
# Re-running is cheap: the install is skipped while setup.py and requirements-build.txt are unchanged.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$root/.venv}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
    echo "setup-env: creating virtual environment $venv"
    "$python" -m venv "$venv"
fi
stamp="$venv/.ran_fairseq-install-stamp"
want=$(cat "$root/setup.py" "$root/requirements-build.txt" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# fairseq compiles extensions against torch/numpy/cython, so they come first and the package is
# installed without build isolation (an isolated build would fetch an unpinned torch).
echo "setup-env: installing build requirements (torch, numpy, cython)"
"${pip[@]}" install -q -r "$root/requirements-build.txt"
echo "setup-env: installing ran_fairseq and fairseq (the first time, fairseq compiles for ~3 minutes)"
"${pip[@]}" install -q --no-build-isolation -e "$root[test]"
echo "$want" > "$stamp"
echo "setup-env: ready ($venv)"
