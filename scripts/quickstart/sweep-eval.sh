#!/usr/bin/env bash
# Score a sweep run's checkpoints: beam 5 on test_2016 (and valid), as make demo does.
#   scripts/quickstart/sweep-eval.sh NAME [UPDATES...]     (default: every interval checkpoint)
#   AVG="N@U ..." also scores the average of the N interval checkpoints ending at update U.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PATH="$root/.venv/bin:$PATH"
name=$1; shift
data=data-bin/multi30k.de-en
run=results/quickstart/runs/$name
save=checkpoints/sweep/$name
SPLITS=${SPLITS:-test}
score() {  # score LABEL CHECKPOINT
    for split in $SPLITS; do
        [ "$split" = test ] && subset=test || subset=valid
        out=$run/gen-$1.$split.txt
        fairseq-generate "$data" --user-dir ran_fairseq --path "$2" --task translation \
            --source-lang de --target-lang en --gen-subset "$subset" --cpu --num-workers 0 \
            --beam 5 --batch-size 128 --max-len-a 1.2 --max-len-b 10 ${GENFLAGS:-} \
            --bpe subword_nmt --bpe-codes "$data/code" --tokenizer moses > "$out" 2> "$out.log"
        python -m ran_text.evaluate --generate-output "$out" \
            --ref "$data/$subset.raw.en" --json > "$run/score-$1.$split.json"
        echo "$name $1 $split $(cut -c1-40 "$run/score-$1.$split.json")"
    done
}
ups=("$@")
if [ ${#ups[@]} -eq 0 ]; then
    mapfile -t ups < <(ls "$save" | sed -n 's/^checkpoint_[0-9]*_\([0-9]*\)\.pt$/\1/p' | sort -n)
fi
for u in "${ups[@]}"; do
    score "u$u" "$(ls "$save"/checkpoint_*_"$u".pt)"
done
for spec in ${AVG:-}; do
    n=${spec%@*}; u=${spec#*@}
    mapfile -t paths < <(ls "$save" | sed -n 's/^checkpoint_[0-9]*_\([0-9]*\)\.pt$/\1 &/p' | sort -n \
        | awk -v u="$u" '$1 <= u {print $2}' | tail -n "$n")
    python -m ran_fairseq.checkpoint_average --output "$save/avg$n-u$u.pt" "${paths[@]/#/$save/}" >/dev/null
    score "avg$n-u$u" "$save/avg$n-u$u.pt"
done
