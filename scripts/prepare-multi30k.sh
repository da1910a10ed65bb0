#!/usr/bin/env bash
# Multi30k (task 1) SRC->TGT into a fairseq data-bin: Moses tokenization, joint BPE, binarization.
#   scripts/prepare-multi30k.sh SRC TGT [flags]        SRC, TGT: two of en de fr cs
# Flags go to `python -m ran_text.prepare multi30k` (its --help lists them all), e.g.
#   --bpe-merges N (10000)  --lowercase  --raw-dir DIR  --out DIR  --download  --force
# Raw files {train,val,test_2016_flickr}.LANG.gz come from --raw-dir, else $MULTI30K_DIR, else
# ../shared/data/multi30k, else ~/.cache/ran_fairseq/multi30k, else are downloaded once into that
# cache (docs/data.md). Output: data-bin/multi30k.SRC-TGT. Rerunning unchanged is a no-op.
# PYTHON=exe picks the interpreter (default: the checkout's .venv, else python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 2 ] || [[ $1 == -* ]] || [[ $2 == -* ]]; then
    sed -n '2,9p' "${BASH_SOURCE[0]}" | cut -c3- >&2
    exit 2
fi
src=$1
tgt=$2
shift 2
. "$root/scripts/lib.sh"
exec "$python" -m ran_text.prepare multi30k --src "$src" --tgt "$tgt" "$@"
