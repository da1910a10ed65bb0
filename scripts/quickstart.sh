#!/usr/bin/env bash
# The main job (make demo): set up, prepare Multi30k SRC->TGT, train a small model for a few minutes
# on the CPU, translate the test set with beam search, print sacreBLEU/chrF/TER and examples.
#   SRC, TGT      language pair (default de, en)
#   MULTI30K_DIR  raw Multi30k (default ../shared/data/multi30k)
#   CONFIG        fairseq-train flags (default configs/quickstart.args); extra flags: "$@"
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
VENV=${VENV:-$root/.venv} scripts/setup-env.sh
export PATH="${VENV:-$root/.venv}/bin:$PATH"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

src=${SRC:-de}
tgt=${TGT:-en}
config=${CONFIG:-configs/quickstart.args}
data=data-bin/multi30k.$src-$tgt
save=checkpoints/quickstart.$src-$tgt
out=results/quickstart.$src-$tgt
mkdir -p "$out"

echo "== 1/4 prepare Multi30k $src-$tgt"
scripts/prepare-multi30k.sh "$src" "$tgt"

echo "== 2/4 train ($config)"
read -r -a flags <<< "$(sed -e 's/#.*//' "$config" | tr '\n' ' ')"
rm -rf "$save"
fairseq-train "$data" --user-dir ran_fairseq --task translation --source-lang "$src" \
    --target-lang "$tgt" --cpu --num-workers 0 --save-dir "$save" "${flags[@]}" "$@"

echo "== 3/4 translate the test set (beam 5)"
fairseq-generate "$data" --user-dir ran_fairseq --path "$save/checkpoint_last.pt" \
    --task translation --source-lang "$src" --target-lang "$tgt" --gen-subset test --cpu \
    --beam 5 --batch-size 128 --num-workers 0 --bpe subword_nmt --bpe-codes "$data/code" \
    --tokenizer moses --scoring sacrebleu > "$out/generate-test.txt"
tail -n 1 "$out/generate-test.txt"

echo "== 4/4 score the detokenized output against the raw references"
python -m ran_fairseq.scoring.evaluate --generate-output "$out/generate-test.txt" \
    --ref "$data/test.raw.$tgt" | tee "$out/scores.txt"
echo
echo "Examples (source / reference / translation):"
for i in 0 1 2; do
    sed -n "$((i + 1))p" "$data/test.raw.$src"
    sed -n "$((i + 1))p" "$data/test.raw.$tgt"
    grep -P "^D-$i\t" "$out/generate-test.txt" | cut -f3
    echo
done
echo "Checkpoints: $save   translations and scores: $out"
