#!/usr/bin/env bash
# IWSLT'17 English-Italian (TED talks, the multilingual task's training/development release):
#   train   train.tags.en-it (about 232k pairs), talk metadata lines dropped; Moses tokenization,
#           not lowercased; pairs over 175 tokens or with a length ratio above 1.5 dropped
#   valid   TED dev2010 (929 sentences);   test   TED tst2010 (1,566 sentences): the only
#           dev/test sets of the multilingual release (the 2017 evaluation set is not in it)
#   joint BPE with 8,000 merges (Rosendahl et al. 2021, §4)
#   scripts/prepare-iwslt17-en-it.sh [SRC TGT] [flags]    SRC TGT: en it (default) or it en
# Flags go to `python -m ran_text.prepare custom` (--bpe-merges, --out, --force, ...).
# The archive (wit3's 2017-01-trnmted DeEnItNlRo-DeEnItNlRo, 0.3 GB, as mirrored by Hugging Face)
# is downloaded with curl or wget to $ORIG_DIR/iwslt17 (default work/orig; put a copy there to
# skip the download); output: data-bin/iwslt17.SRC-TGT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
orig=${ORIG_DIR:-$root/work/orig}
. "$root/scripts/lib.sh"

pair "IWSLT'17 English-Italian" en it "$@"
set -- "${pair_args[@]}"

# wit3.fbk.eu, the original host, is gone; the Hugging Face dataset IWSLT/iwslt2017 keeps the archive.
fetch_unpack "iwslt17/DeEnItNlRo-DeEnItNlRo.zip https://huggingface.co/datasets/IWSLT/iwslt2017/resolve/main/data/2017-01-trnmted/texts/DeEnItNlRo/DeEnItNlRo/DeEnItNlRo-DeEnItNlRo.zip"
dir=$orig/iwslt17/DeEnItNlRo-DeEnItNlRo

# The en-it files serve both directions. Beside the metadata the pipeline's IWSLT reader drops
# (url, talkid, keywords; title and description are kept as sentences), the 2017 release has
# speaker, reviewer, translator and doc lines: drop those here (again only when the archive was
# unpacked anew), as fairseq's prepare-iwslt17-multilingual.sh does. Both sides hold them on the
# same lines, so the pairs stay aligned.
train=$orig/iwslt17/train
mkdir -p "$train"
for lang in en it; do
    tags=$(find_one "$dir" "train.tags.en-it.$lang")
    if [ ! "$train/train.tags.en-it.$lang" -nt "$tags" ]; then
        grep -v -e '<speaker>' -e '<reviewer' -e '<translator' -e '<doc' -e '</doc>' "$tags" \
            > "$train/train.tags.en-it.$lang.part"
        mv "$train/train.tags.en-it.$lang.part" "$train/train.tags.en-it.$lang"
    fi
done
valid_src=$(find_one "$dir" "IWSLT17.TED.dev2010.en-it.$src.xml")
valid_tgt=$(find_one "$dir" "IWSLT17.TED.dev2010.en-it.$tgt.xml")
test_src=$(find_one "$dir" "IWSLT17.TED.tst2010.en-it.$src.xml")
test_tgt=$(find_one "$dir" "IWSLT17.TED.tst2010.en-it.$tgt.xml")

exec "$python" -m ran_text.prepare custom --src "$src" --tgt "$tgt" \
    --train "$train/train.tags.en-it.$src" "$train/train.tags.en-it.$tgt" \
    --valid "$valid_src" "$valid_tgt" --test "$test_src" "$test_tgt" \
    --bpe-merges 8000 --clean-max-len 175 --clean-ratio 1.5 --clean-on tok \
    --out "$root/data-bin/iwslt17.$src-$tgt" "$@"
