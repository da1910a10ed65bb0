#!/usr/bin/env bash
# WMT'17 or WMT'18 English-Turkish (the two years differ in their valid and test sets only):
#   train   SETimes2 (about 207k pairs); Moses punctuation normalization and tokenization with -a
#           (split hyphens); joint BPE with 16,000 merges; train pairs over 250 BPE units or with
#           a length ratio above 1.5 dropped
#   2017    valid newstest2016 (3,000 sentences);   test newstest2017 (3,007 sentences)
#   2018    valid newstest2017 (3,007 sentences);   test newstest2018 (3,000 sentences)
#   scripts/prepare-wmt-en-tr.sh YEAR [SRC TGT] [flags]
#           YEAR: 2017 or 2018; SRC TGT: en tr (default) or tr en
# Flags go to `python -m ran_text.prepare custom` (--bpe-merges, --out, --force, ...).
# About 50 MB is downloaded with curl or wget to $ORIG_DIR (default work/orig); output:
# data-bin/wmtYY.SRC-TGT (wmt17.en-tr, wmt18.tr-en, ...).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
orig=${ORIG_DIR:-$root/work/orig}
. "$root/scripts/lib.sh"

case ${1:-} in
    2017 | 2018) year=$1; shift ;;
    *) echo "error: the first argument is the WMT year, 2017 or 2018, got '${1:-}'" \
            "(usage: scripts/prepare-wmt-en-tr.sh YEAR [SRC TGT] [flags])" >&2
       exit 2 ;;
esac
yy=${year#20}
prev_yy=$((yy - 1))

pair "WMT'$yy English-Turkish" en tr "$@"
set -- "${pair_args[@]}"

# archive path under $orig, and its URL; each is unpacked beside itself, minus the extension.
# The valid set is the previous year's test set.
archives=(
    "opus/SETIMES2.en-tr.zip https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-tr.txt.zip"
    "wmt$prev_yy/test.tgz https://data.statmt.org/wmt$prev_yy/translation-task/test.tgz"
    "wmt$yy/test.tgz https://data.statmt.org/wmt$yy/translation-task/test.tgz"
)
fetch_unpack "${archives[@]}"

setimes=$(find_one "$orig/opus/SETIMES2.en-tr" SETIMES.en-tr.en)
valid=newstest20$prev_yy-$src$tgt
test=newstest$year-$src$tgt
valid_src=$(find_one "$orig/wmt$prev_yy/test" "$valid-src.$src.sgm")
valid_tgt=$(find_one "$orig/wmt$prev_yy/test" "$valid-ref.$tgt.sgm")
test_src=$(find_one "$orig/wmt$yy/test" "$test-src.$src.sgm")
test_tgt=$(find_one "$orig/wmt$yy/test" "$test-ref.$tgt.sgm")

exec "$python" -m ran_text.prepare custom --src "$src" --tgt "$tgt" \
    --train-prefix "${setimes%.en}" \
    --valid "$valid_src" "$valid_tgt" --test "$test_src" "$test_tgt" \
    --normalize-punct --aggressive-dash-splits --bpe-merges 16000 \
    --clean-max-len 250 --clean-ratio 1.5 --clean-on bpe \
    --out "$root/data-bin/wmt$yy.$src-$tgt" "$@"
