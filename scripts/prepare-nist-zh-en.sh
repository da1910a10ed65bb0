#!/usr/bin/env bash
# NIST Chinese-English as in Yang et al. (2017), section 3.1: train FBIS + LDC2004T08 (Hong Kong
# News), about 1.5M pairs; valid NIST MT02 + MT03; test NIST MT05. These corpora are licensed by
# the LDC and cannot be downloaded here: put them, sentence-aligned, one sentence a line, the
# Chinese side already segmented into words, in $NIST_DIR as
#   train.zh train.en   mt02.zh mt02.en   mt03.zh mt03.en   mt05.zh mt05.en
# (for MT02/03/05 the .en file is one reference; the paper's multi-reference BLEU is not
# reproduced by the engine, which scores against one reference).
#   NIST_DIR=/path scripts/prepare-nist-zh-en.sh [zh en] [flags]
# Flags go to `python -m ran_text.prepare custom`; output: data-bin/nist.SRC-TGT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/lib.sh"

pair "NIST Chinese-English" zh en "$@"
set -- "${pair_args[@]}"
dir=${NIST_DIR:-}
if [ -z "$dir" ]; then
    echo "error: NIST Chinese-English (LDC-licensed) is not downloadable: set NIST_DIR to a" \
         "directory with train, mt02, mt03 and mt05 .zh/.en files (see the head of $0)" >&2
    exit 2
fi
for stem in train mt02 mt03 mt05; do
    for lang in zh en; do
        [ -s "$dir/$stem.$lang" ] || { echo "error: $dir/$stem.$lang is missing (NIST_DIR)" >&2; exit 2; }
    done
done
exec "$python" -m ran_text.prepare custom --src "$src" --tgt "$tgt" \
    --train-prefix "$dir/train" --valid-prefix "$dir/mt02" --valid-prefix "$dir/mt03" \
    --test-prefix "$dir/mt05" --out "$root/data-bin/nist.$src-$tgt" "$@"
