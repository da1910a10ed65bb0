#!/usr/bin/env bash
# WMT'16 Romanian-English:
#   train   Europarl v8 + SETimes2 (about 600k pairs); Moses punctuation normalization and
#           tokenization with -a (split hyphens); joint BPE with 20,000 merges (Rosendahl et al.
#           2021, §4); train pairs over 250 BPE units or with a length ratio above 1.5 dropped
#   valid   newsdev2016 (1,999 sentences);   test   newstest2016 (1,999 sentences)
#   scripts/prepare-wmt16-ro-en.sh [SRC TGT] [flags]    SRC TGT: ro en (default) or en ro
# Flags go to `python -m ran_text.prepare custom` (--bpe-merges, --out, --force, ...).
# About 0.3 GB is downloaded with curl or wget to $ORIG_DIR (default work/orig); output:
# data-bin/wmt16.SRC-TGT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
orig=${ORIG_DIR:-$root/work/orig}
. "$root/scripts/lib.sh"

pair "WMT'16 Romanian-English" ro en "$@"
set -- "${pair_args[@]}"

# archive path under $orig, and its URL; each is unpacked beside itself, minus the extension
archives=(
    "wmt16/training-parallel-ep-v8.tgz https://data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz"
    "opus/SETIMES2.en-ro.zip https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip"
    "wmt16/dev.tgz https://data.statmt.org/wmt16/translation-task/dev.tgz"
    "wmt16/test.tgz https://data.statmt.org/wmt16/translation-task/test.tgz"
)
fetch_unpack "${archives[@]}"

europarl=$(find_one "$orig/wmt16/training-parallel-ep-v8" europarl-v8.ro-en.en)
setimes=$(find_one "$orig/opus/SETIMES2.en-ro" SETIMES.en-ro.en)
valid_src=$(find_one "$orig/wmt16/dev" "newsdev2016-$src$tgt-src.$src.sgm")
valid_tgt=$(find_one "$orig/wmt16/dev" "newsdev2016-$src$tgt-ref.$tgt.sgm")
test_src=$(find_one "$orig/wmt16/test" "newstest2016-$src$tgt-src.$src.sgm")
test_tgt=$(find_one "$orig/wmt16/test" "newstest2016-$src$tgt-ref.$tgt.sgm")

exec "$python" -m ran_text.prepare custom --src "$src" --tgt "$tgt" \
    --train-prefix "${europarl%.en}" --train-prefix "${setimes%.en}" \
    --valid "$valid_src" "$valid_tgt" --test "$test_src" "$test_tgt" \
    --normalize-punct --aggressive-dash-splits --bpe-merges 20000 \
    --clean-max-len 250 --clean-ratio 1.5 --clean-on bpe \
    --out "$root/data-bin/wmt16.$src-$tgt" "$@"
