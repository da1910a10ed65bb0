#!/usr/bin/env bash
# Reproduce the shape of Elbayad et al. (2018), "Pervasive Attention: 2D Convolutional Neural Networks for Sequence-to-Sequence Prediction", Tables 1-3 and Fig. 6:
# the same command as `ran-reproduce pervasive` (or `python -m ran_lab.reproduce pervasive`),
# whose --help lists the options; the paper's settings, systems and numbers are configs/pervasive/.
#   scripts/reproduce-pervasive.sh --pairs de-en --systems max,Transformer --max-update 300 --out runs/try --checkpoints runs/try/checkpoints
# PYTHON=exe picks the interpreter (default: the checkout's .venv, else python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/lib.sh"
exec "$python" -m ran_lab.reproduce pervasive "$@"
