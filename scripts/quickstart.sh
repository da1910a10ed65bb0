#!/usr/bin/env bash
# The main job (make demo): set up, prepare Multi30k SRC->TGT, train a small model on the CPU to its
# update budget (optionally averaging its last checkpoints), translate the test set with beam
# search, and print sacreBLEU/chrF/TER and examples. Everything it writes goes to git-ignored folders:
# data-bin/, checkpoints/ and demo-out/ (never results/, which holds committed measurements).
#   SRC, TGT      language pair (default de, en)
#   MULTI30K_DIR  raw Multi30k (default: downloaded once into ~/.cache/ran_fairseq; docs/data.md)
#   CONFIG        fairseq-train flags (default configs/quickstart.args); extra flags: "$@"
#   AVERAGE_LAST  translate with the average of the last N checkpoints (default 1: checkpoint_last;
#                 N > 1 needs --save-interval-updates in CONFIG)
#   WORKDIR       where data-bin/, checkpoints/ and demo-out/ go (default: the checkout)
#   SETUP=0       skip step 1 (the environment VENV, default .venv, is used as it is)
#   TIME_CAP_MINUTES  stop training after this many minutes whatever the update count (default:
#                 none); a run stopped early says so at the end, with the rate and load it measured
#   OMP_NUM_THREADS   training threads (default: one per core that is free, measured at the start)
# The terminal shows the step headers, fairseq's training progress, the scores and examples; each
# step's full output goes to a log in demo-out/quickstart.SRC-TGT/ (a failed step shows its tail),
# and demo.json there records the seconds of each step, the updates planned and reached, the scores
# and the machine. Helpers: scripts/quickstart/demo.py.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
work=${WORKDIR:-$root}
venv=${VENV:-$root/.venv}
src=${SRC:-de}
tgt=${TGT:-en}
config=${CONFIG:-configs/quickstart.args}
average=${AVERAGE_LAST:-1}
cap=${TIME_CAP_MINUTES:-}
helper=$root/scripts/quickstart/demo.py
data=$work/data-bin/multi30k.$src-$tgt
save=$work/checkpoints/quickstart.$src-$tgt
out=$work/demo-out/quickstart.$src-$tgt
mkdir -p "$out"
[ -f "$config" ] || { echo "quickstart: CONFIG=$config: no such file" >&2; exit 2; }
[[ $average =~ ^[1-9][0-9]*$ ]] || { echo "quickstart: AVERAGE_LAST must be >= 1, got '$average'" >&2; exit 2; }
[[ -z $cap || $cap =~ ^[0-9]*\.?[0-9]+$ ]] \
    || { echo "quickstart: TIME_CAP_MINUTES must be a number of minutes, got '$cap'" >&2; exit 2; }

started=$SECONDS
step_start=$SECONDS
step_key=
step_seconds=()  # KEY=SECONDS of each finished step, for demo.json
# header KEY TEXT: start a step (and record the seconds of the one before)
header() { end_step; step_key=$1; shift; step_start=$SECONDS; echo; echo "== $*"; }
end_step() { [ -z "$step_key" ] || step_seconds+=("$step_key=$(( SECONDS - step_start ))"); step_key=; }
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

header setup "1/5 set up the environment ($venv)"
if [ "${SETUP:-1}" = 0 ]; then
    echo "skipped (SETUP=0)"
else
    VENV=$venv EXTRAS=${EXTRAS-} SETUP_LOG=$out/setup.log scripts/setup-env.sh
fi
export PATH="$venv/bin:$PATH"
# one training thread per free core: a thread that shares its core with another busy process
# holds the others up at every step
if [ -n "${OMP_NUM_THREADS:-}" ]; then
    load="OMP_NUM_THREADS=$OMP_NUM_THREADS set by the user"
else
    IFS=$'\t' read -r OMP_NUM_THREADS load < <(python3 "$helper" threads) || true
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
export OMP_NUM_THREADS
export PYTHONUNBUFFERED=1  # fairseq's progress lines as they come, not in 4 kB blocks

header prepare "2/5 prepare Multi30k $src-$tgt"
logged "$out/prepare.log" scripts/prepare-multi30k.sh "$src" "$tgt" --out "$data"
tail -n 1 "$out/prepare.log"
took "$out/prepare.log"

read -r -a flags <<< "$(sed -e 's/#.*//' "$config" | tr '\n' ' ')"
planned=$(python3 "$helper" planned "${flags[@]}" "$@")
cap_flags=()
[ -n "$cap" ] && cap_flags=(--stop-time-hours "$(python3 -c "print($cap / 60)")")
header train "3/5 train ($config: $planned updates${cap:+, at most $cap min}; $OMP_NUM_THREADS thread(s): $load)"
rm -rf "$save"
# fairseq's progress lines (train_inner, valid, the end-of-epoch train line) without their
# timestamp, each with the expected finish time; everything else (config dump, warnings) only in
# the log
set +e
fairseq-train "$data" --user-dir ran_fairseq --task translation --source-lang "$src" \
    --target-lang "$tgt" --cpu --num-workers 0 --save-dir "$save" --log-format simple \
    "${flags[@]}" "${cap_flags[@]}" "$@" 2>&1 | tee "$out/train.log" \
    | { python3 -u "$helper" progress "$planned" || true; }
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || failed "$out/train.log"
train_seconds=$(( SECONDS - step_start ))
took "$out/train.log"

header translate "4/5 translate the test set (beam 5)"
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

header score "5/5 score the detokenized translations against the raw references"
python -m ran_text.evaluate --generate-output "$out/generate-test.txt" \
    --ref "$data/test.raw.$tgt" > "$out/scores.txt" 2> "$out/score.log" || failed "$out/score.log"
python -m ran_text.evaluate --generate-output "$out/generate-test.txt" \
    --ref "$data/test.raw.$tgt" --json > "$out/scores.json" 2>> "$out/score.log" || failed "$out/score.log"
cat "$out/scores.txt"
echo
echo "Examples (source / reference / translation):"
for i in 0 1 2; do
    sed -n "$((i + 1))p" "$data/test.raw.$src"
    sed -n "$((i + 1))p" "$data/test.raw.$tgt"
    grep -P "^D-$i\t" "$out/generate-test.txt" | cut -f3
    echo
done
end_step
# demo.json: what this run measured, to keep (copy it into results/quickstart/: its README)
export DEMO_OUT=$out DEMO_PAIR=$src-$tgt DEMO_CONFIG=$config DEMO_AVERAGE=$average \
    DEMO_SECONDS="${step_seconds[*]}" DEMO_TOTAL=$(( SECONDS - started )) DEMO_PLANNED=$planned \
    DEMO_TIME_CAP=$cap DEMO_LOAD=$load DEMO_THREADS=$OMP_NUM_THREADS \
    DEMO_TRAIN_LOG=$out/train.log DEMO_TRAIN_SECONDS=$train_seconds
logged "$out/demo-json.log" python "$helper" record "$@"
python3 "$helper" verdict
echo "Done in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s."
echo "Checkpoints: $save   translations, scores, logs and demo.json: $out"
