#!/usr/bin/env bash
# WMT'17 English-Turkish:
#   train   SETimes2 (about 207k pairs); Moses punctuation normalization and tokenization with -a
#           (split hyphens); joint BPE with 16,000 merges; train pairs over 250 BPE units or with
#           a length ratio above 1.5 dropped
#   valid   newstest2016 (3,000 sentences);   test   newstest2017 (3,007 sentences)
#   scripts/prepare-wmt17-en-tr.sh [SRC TGT] [flags]    SRC TGT: en tr (default) or tr en
# Flags go to `python -m ran_fairseq.data.prepare custom` (--bpe-merges, --out, --force, ...).
# About 50 MB is downloaded with curl or wget to $ORIG_DIR (default work/orig); output:
# data-bin/wmt17.SRC-TGT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
orig=${ORIG_DIR:-$root/work/orig}
. "$root/scripts/lib.sh"

pair "WMT'17 English-Turkish" en tr "$@"
set -- "${pair_args[@]}"

# archive path under $orig, and its URL; each is unpacked beside itself, minus the extension
archives=(
    "opus/SETIMES2.en-tr.zip https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-tr.txt.zip"
    "wmt16/test.tgz https://data.statmt.org/wmt16/translation-task/test.tgz"
    "wmt17/test.tgz https://data.statmt.org/wmt17/translation-task/test.tgz"
)
for entry in "${archives[@]}"; do
    read -r name url <<< "$entry"
    fetch "$url" "$orig/$name"
    unpack "$orig/$name" "$orig/${name%.*}"
done

setimes=$(find_one "$orig/opus/SETIMES2.en-tr" SETIMES.en-tr.en)
valid_src=$(find_one "$orig/wmt16/test" "newstest2016-$src$tgt-src.$src.sgm")
valid_tgt=$(find_one "$orig/wmt16/test" "newstest2016-$src$tgt-ref.$tgt.sgm")
test_src=$(find_one "$orig/wmt17/test" "newstest2017-$src$tgt-src.$src.sgm")
test_tgt=$(find_one "$orig/wmt17/test" "newstest2017-$src$tgt-ref.$tgt.sgm")

exec "$python" -m ran_fairseq.data.prepare custom --src "$src" --tgt "$tgt" \
    --train-prefix "${setimes%.en}" \
    --valid "$valid_src" "$valid_tgt" --test "$test_src" "$test_tgt" \
    --normalize-punct --aggressive-dash-splits --bpe-merges 16000 \
    --clean-max-len 250 --clean-ratio 1.5 --clean-on bpe \
    --out "$root/data-bin/wmt17.$src-$tgt" "$@"
