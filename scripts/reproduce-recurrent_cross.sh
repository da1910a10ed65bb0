#!/usr/bin/env bash
# Reproduce the shape of Rosendahl et al. (2021), "Recurrent Attention for the Transformer", Tables 1-2:
# the same command as `ran-reproduce recurrent_cross` (or `python -m ran_lab.reproduce recurrent_cross`),
# whose --help lists the options; the paper's settings, systems and numbers are configs/recurrent_cross/.
#   scripts/reproduce-recurrent_cross.sh --pairs de-en --systems baseline,coverage --max-update 300 --out runs/try --checkpoints runs/try/checkpoints
#   scripts/reproduce-recurrent_cross.sh --full iwslt17-en-it --dry-run
# PYTHON=exe picks the interpreter (default: the checkout's .venv, else python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/lib.sh"
exec "$python" -m ran_lab.reproduce recurrent_cross "$@"
