#!/usr/bin/env bash
# The main job (make demo): set up, prepare Multi30k SRC->TGT, train a small model for a few minutes
# on the CPU (optionally averaging its last checkpoints), translate the test set with beam search,
# and print sacreBLEU/chrF/TER and examples.
#   SRC, TGT      language pair (default de, en)
#   MULTI30K_DIR  raw Multi30k (default: downloaded once into ~/.cache/ran_fairseq; docs/data.md)
#   CONFIG        fairseq-train flags (default configs/quickstart.args); extra flags: "$@"
#   AVERAGE_LAST  translate with the average of the last N checkpoints (default 1: checkpoint_last;
#                 N > 1 needs --save-interval-updates in CONFIG)
#   WORKDIR       where data-bin/, checkpoints/ and results/ go (default: the checkout)
#   SETUP=0       skip step 1 (the environment VENV, default .venv, is used as it is)
# The terminal shows the step headers, fairseq's training progress, the scores and examples; each
# step's full output goes to a log in results/quickstart.SRC-TGT/ (a failed step shows its tail).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
work=${WORKDIR:-$root}
venv=${VENV:-$root/.venv}
src=${SRC:-de}
tgt=${TGT:-en}
config=${CONFIG:-configs/quickstart.args}
average=${AVERAGE_LAST:-1}
data=$work/data-bin/multi30k.$src-$tgt
save=$work/checkpoints/quickstart.$src-$tgt
out=$work/results/quickstart.$src-$tgt
mkdir -p "$out"
[ -f "$config" ] || { echo "quickstart: CONFIG=$config: no such file" >&2; exit 2; }
[[ $average =~ ^[1-9][0-9]*$ ]] || { echo "quickstart: AVERAGE_LAST must be >= 1, got '$average'" >&2; exit 2; }

started=$SECONDS
step_start=$SECONDS
header() { step_start=$SECONDS; echo; echo "== $*"; }
took() { echo "   ($(( SECONDS - step_start )) s; full output: $1)"; }
# logged LOG CMD...: run CMD with all its output in LOG; if it fails, show LOG's tail and stop.
logged() {
    local log=$1; shift
    if ! "$@" > "$log" 2>&1; then
        failed "$log"
    fi
}
failed() {
    echo "quickstart: FAILED; the last lines of $1:" >&2
    tail -n 40 "$1" | sed 's/^/    /' >&2
    exit 1
}

header "1/5 set up the environment ($venv)"
if [ "${SETUP:-1}" = 0 ]; then
    echo "skipped (SETUP=0)"
else
    VENV=$venv EXTRAS=${EXTRAS-} SETUP_LOG=$out/setup.log scripts/setup-env.sh
fi
export PATH="$venv/bin:$PATH"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export PYTHONUNBUFFERED=1  # fairseq's progress lines as they come, not in 4 kB blocks

header "2/5 prepare Multi30k $src-$tgt"
logged "$out/prepare.log" scripts/prepare-multi30k.sh "$src" "$tgt" --out "$data"
tail -n 1 "$out/prepare.log"
took "$out/prepare.log"

header "3/5 train ($config; OMP_NUM_THREADS=$OMP_NUM_THREADS)"
read -r -a flags <<< "$(sed -e 's/#.*//' "$config" | tr '\n' ' ')"
rm -rf "$save"
# fairseq's progress lines (train_inner, valid, the end-of-epoch train line) without their
# timestamp; everything else (config dump, warnings) only in the log
progress='^[0-9-]+ [0-9:]+ \| INFO \| (train_inner|train|valid) \| '
set +e
fairseq-train "$data" --user-dir ran_fairseq --task translation --source-lang "$src" \
    --target-lang "$tgt" --cpu --num-workers 0 --save-dir "$save" --log-format simple \
    "${flags[@]}" "$@" 2>&1 | tee "$out/train.log" \
    | { grep --line-buffered -E "$progress" | sed -u -E 's/^[0-9-]+ [0-9:]+ \| INFO \| //' || true; }
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || failed "$out/train.log"
took "$out/train.log"

header "4/5 translate the test set (beam 5)"
if [ "$average" -gt 1 ]; then
    model=$save/checkpoint_avg.pt
    logged "$out/average.log" python -m ran_fairseq.checkpoint_average --output "$model" \
        --last "$average" "$save"
    grep '^averaged' "$out/average.log"
else
    model=$save/checkpoint_last.pt
fi
fairseq-generate "$data" --user-dir ran_fairseq --path "$model" --task translation \
    --source-lang "$src" --target-lang "$tgt" --gen-subset test --cpu --num-workers 0 \
    --beam 5 --max-len-a 1.2 --max-len-b 10 --batch-size 128 \
    --bpe subword_nmt --bpe-codes "$data/code" --tokenizer moses \
    > "$out/generate-test.txt" 2> "$out/generate.log" || failed "$out/generate.log"
took "$out/generate.log"

header "5/5 score the detokenized translations against the raw references"
python -m ran_fairseq.scoring.evaluate --generate-output "$out/generate-test.txt" \
    --ref "$data/test.raw.$tgt" > "$out/scores.txt" 2> "$out/score.log" || failed "$out/score.log"
cat "$out/scores.txt"
echo
echo "Examples (source / reference / translation):"
for i in 0 1 2; do
    sed -n "$((i + 1))p" "$data/test.raw.$src"
    sed -n "$((i + 1))p" "$data/test.raw.$tgt"
    grep -P "^D-$i\t" "$out/generate-test.txt" | cut -f3
    echo
done
echo "Done in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s."
echo "Checkpoints: $save   translations, scores and logs: $out"
