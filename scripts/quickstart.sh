#!/usr/bin/env bash
# The main job (make demo): set up, prepare Multi30k SRC->TGT, train a small model for a few minutes
# on the CPU (optionally averaging its last checkpoints), translate the test set with beam search,
# and print sacreBLEU/chrF/TER and examples. Everything it writes goes to git-ignored folders:
# data-bin/, checkpoints/ and demo-out/ (never results/, which holds committed measurements).
#   SRC, TGT      language pair (default de, en)
#   MULTI30K_DIR  raw Multi30k (default: downloaded once into ~/.cache/ran_fairseq; docs/data.md)
#   CONFIG        fairseq-train flags (default configs/quickstart.args); extra flags: "$@"
#   AVERAGE_LAST  translate with the average of the last N checkpoints (default 1: checkpoint_last;
#                 N > 1 needs --save-interval-updates in CONFIG)
#   WORKDIR       where data-bin/, checkpoints/ and demo-out/ go (default: the checkout)
#   SETUP=0       skip step 1 (the environment VENV, default .venv, is used as it is)
# The terminal shows the step headers, fairseq's training progress, the scores and examples; each
# step's full output goes to a log in demo-out/quickstart.SRC-TGT/ (a failed step shows its tail),
# and demo.json there records the seconds of each step, the scores and the machine.
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
out=$work/demo-out/quickstart.$src-$tgt
mkdir -p "$out"
[ -f "$config" ] || { echo "quickstart: CONFIG=$config: no such file" >&2; exit 2; }
[[ $average =~ ^[1-9][0-9]*$ ]] || { echo "quickstart: AVERAGE_LAST must be >= 1, got '$average'" >&2; exit 2; }

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
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export PYTHONUNBUFFERED=1  # fairseq's progress lines as they come, not in 4 kB blocks

header prepare "2/5 prepare Multi30k $src-$tgt"
logged "$out/prepare.log" scripts/prepare-multi30k.sh "$src" "$tgt" --out "$data"
tail -n 1 "$out/prepare.log"
took "$out/prepare.log"

header train "3/5 train ($config; OMP_NUM_THREADS=$OMP_NUM_THREADS)"
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
python -m ran_fairseq.scoring.evaluate --generate-output "$out/generate-test.txt" \
    --ref "$data/test.raw.$tgt" > "$out/scores.txt" 2> "$out/score.log" || failed "$out/score.log"
python -m ran_fairseq.scoring.evaluate --generate-output "$out/generate-test.txt" \
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
DEMO_OUT=$out DEMO_PAIR=$src-$tgt DEMO_CONFIG=$config DEMO_AVERAGE=$average \
DEMO_SECONDS="${step_seconds[*]}" DEMO_TOTAL=$(( SECONDS - started )) \
    logged "$out/demo-json.log" python - "$@" <<'DEMO_JSON'
import json, os, re, sys
from pathlib import Path
from ran_fairseq.lab.common.machine import git_commit, machine_info

out = Path(os.environ["DEMO_OUT"])
updates = re.findall(r"num_updates=(\d+)", (out / "train.log").read_text(errors="replace"))
seconds = dict(kv.split("=") for kv in os.environ["DEMO_SECONDS"].split())
record = {
    "pair": os.environ["DEMO_PAIR"], "config": os.environ["DEMO_CONFIG"], "extra_flags": sys.argv[1:],
    "average_last": int(os.environ["DEMO_AVERAGE"]),
    "updates": int(updates[-1]) if updates else None,
    "seconds": {k: int(v) for k, v in seconds.items()},
    "total_seconds": int(os.environ["DEMO_TOTAL"]),
    "scores": json.loads((out / "scores.json").read_text()),
    "machine": dict(machine_info("cpu", int(os.environ.get("OMP_NUM_THREADS", "1"))),
                    git_commit=git_commit()),
}
(out / "demo.json").write_text(json.dumps(record, indent=1) + "\n")
DEMO_JSON
echo "Done in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s."
echo "Checkpoints: $save   translations, scores, logs and demo.json: $out"
