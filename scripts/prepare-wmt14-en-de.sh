#!/usr/bin/env bash
# WMT'14 English-German as in fairseq's examples/translation/prepare-wmt14en2de.sh with --icml17
# (the WMT'14 corpora), with newstest2013 as valid:
#   train   Europarl v7 + Common Crawl + News Commentary v9 (about 4.5M pairs); Moses punctuation
#           normalization and tokenization with -a (split hyphens); joint BPE with 40,000 merges;
#           train pairs over 250 BPE units or with a length ratio above 1.5 dropped
#   valid   newstest2013 (3,000 sentences)
#   test    newstest2014, full version (3,003 sentences; sacrebleu -t wmt14/full)
#   test1   newstest2015 (2,169 sentences; the -SRCTGT version of the direction, as sacrebleu
#           -t wmt15): fairseq-generate --gen-subset test1. Yang et al. (2017, section 3.1) test
#           on newstest2014 and newstest2015.
#   scripts/prepare-wmt14-en-de.sh [SRC TGT] [flags]    SRC TGT: en de (default) or de en
# Flags go to `python -m ran_text.prepare custom` (--bpe-merges, --out, --force, ...).
# About 1.6 GB is downloaded with curl or wget to $ORIG_DIR (default work/orig); output:
# data-bin/wmt14.SRC-TGT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
orig=${ORIG_DIR:-$root/work/orig}
. "$root/scripts/lib.sh"

pair "WMT'14 English-German" en de "$@"
set -- "${pair_args[@]}"

# archive path under $orig, and its URL; each is unpacked beside itself, minus the extension
archives=(
    "wmt13/training-parallel-europarl-v7.tgz https://statmt.org/wmt13/training-parallel-europarl-v7.tgz"
    "wmt13/training-parallel-commoncrawl.tgz https://statmt.org/wmt13/training-parallel-commoncrawl.tgz"
    "wmt14/training-parallel-nc-v9.tgz https://statmt.org/wmt14/training-parallel-nc-v9.tgz"
    "wmt13/test.tgz https://statmt.org/wmt13/test.tgz"
    "wmt14/test-full.tgz https://statmt.org/wmt14/test-full.tgz"
    "wmt15/test.tgz https://statmt.org/wmt15/test.tgz"
)
fetch_unpack "${archives[@]}"

# The training corpora are named after the pair de-en whatever the direction.
europarl=$(find_one "$orig/wmt13/training-parallel-europarl-v7" europarl-v7.de-en.en)
commoncrawl=$(find_one "$orig/wmt13/training-parallel-commoncrawl" commoncrawl.de-en.en)
newscomm=$(find_one "$orig/wmt14/training-parallel-nc-v9" news-commentary-v9.de-en.en)
# newstest2013 is multi-parallel: every language is a "src" file.
valid_src=$(find_one "$orig/wmt13/test" "newstest2013-src.$src.sgm")
valid_tgt=$(find_one "$orig/wmt13/test" "newstest2013-src.$tgt.sgm")
test_src=$(find_one "$orig/wmt14/test-full" "newstest2014-deen-src.$src.sgm")
test_tgt=$(find_one "$orig/wmt14/test-full" "newstest2014-deen-ref.$tgt.sgm")
# newstest2015 has one version per direction: deen (source de) and ende (source en).
test1_src=$(find_one "$orig/wmt15/test" "newstest2015-$src$tgt-src.$src.sgm")
test1_tgt=$(find_one "$orig/wmt15/test" "newstest2015-$src$tgt-ref.$tgt.sgm")

exec "$python" -m ran_text.prepare custom --src "$src" --tgt "$tgt" \
    --train-prefix "${europarl%.en}" --train-prefix "${commoncrawl%.en}" \
    --train-prefix "${newscomm%.en}" \
    --valid "$valid_src" "$valid_tgt" --test "$test_src" "$test_tgt" \
    --test1 "$test1_src" "$test1_tgt" \
    --normalize-punct --aggressive-dash-splits --bpe-merges 40000 \
    --clean-max-len 250 --clean-ratio 1.5 --clean-on bpe \
    --out "$root/data-bin/wmt14.$src-$tgt" "$@"
