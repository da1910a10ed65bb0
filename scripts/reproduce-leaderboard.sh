#!/usr/bin/env bash
# The leaderboard (docs/leaderboard.md): every system of configs/leaderboard/ trained, decoded and
# scored on Multi30k de->en and en->de at one budget, then results/leaderboard/TABLE.md.
#   scripts/reproduce-leaderboard.sh                      # make every run not yet made (resumes), then the page
#   scripts/reproduce-leaderboard.sh --stop-after 230     # start no run after 230 minutes (a job's time limit)
#   scripts/reproduce-leaderboard.sh page                 # the page from the runs there are
#   scripts/reproduce-leaderboard.sh cost                 # the cost columns (a machine with nothing else running)
# PYTHON=exe picks the interpreter (default: the checkout's .venv, else python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/lib.sh"
exec "$python" -m ran_lab.leaderboard "$@"
