#!/usr/bin/env bash
# One run of the quickstart sweep: train with CONFIG's flags plus "$@" on ONE thread,
# saving a checkpoint every EVERY updates, logging JSON progress to runs/NAME/train.log.
#   NAME=label CONFIG=configs/quickstart.args EVERY=100 scripts/quickstart/sweep-run.sh [flags]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PATH="$root/.venv/bin:$PATH"
name=${NAME:?NAME=label}
config=${CONFIG:-configs/quickstart.args}
every=${EVERY:-100}
data=data-bin/multi30k.de-en
run=results/quickstart/runs/$name
save=checkpoints/sweep/$name
rm -rf "$run" "$save"; mkdir -p "$run"
read -r -a flags <<< "$(sed -e 's/#.*//' "$config" | tr '\n' ' ')"
printf '%s\n' "$config" "${flags[*]}" "$*" > "$run/flags.txt"
fairseq-train "$data" --user-dir ran_fairseq --task translation --source-lang de --target-lang en \
    --cpu --num-workers 0 --save-dir "$save" "${flags[@]}" --seed 1 \
    --log-format json --save-interval-updates "$every" --keep-interval-updates -1 "$@" \
    > "$run/train.log" 2>&1
