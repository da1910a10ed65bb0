#!/usr/bin/env bash
# Reproduce the shape of Zeng et al. (2021), "Recurrent Attention for Neural Machine Translation", Tables 1-3:
# the same command as `ran-reproduce ran` (or `python -m ran_lab.reproduce ran`),
# whose --help lists the options; the paper's settings, systems and numbers are configs/ran/.
#   scripts/reproduce-ran.sh --pairs de-en --systems TransF,RAN-ALL --max-update 300 --out runs/try --checkpoints runs/try/checkpoints
#   scripts/reproduce-ran.sh --full wmt17-en-tr --dry-run
# PYTHON=exe picks the interpreter (default: the checkout's .venv, else python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/lib.sh"
exec "$python" -m ran_lab.reproduce ran "$@"
