#!/usr/bin/env bash
# Reproduce the shape of Yang et al. (2017), "Neural Machine Translation with Recurrent Attention Modeling", Tables 2-3:
# the same command as `ran-reproduce dynmem` (or `python -m ran_lab.reproduce dynmem`),
# whose --help lists the options; the paper's settings, systems and numbers are configs/dynmem/.
#   scripts/reproduce-dynmem.sh --pairs de-en --systems "RNNSearch,RNNSearch + window 11"
# PYTHON=exe picks the interpreter (default: the checkout's .venv, else python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/lib.sh"
exec "$python" -m ran_lab.reproduce dynmem "$@"
