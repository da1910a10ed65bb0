#!/usr/bin/env bash
# IWSLT'14 German-English as in fairseq's examples/translation/prepare-iwslt14.sh:
#   train   the TED transcripts of the 2014 release, Moses-tokenized, pairs over 175 tokens or
#           with a length ratio above 1.5 dropped, lowercased; every 23rd pair held out as valid
#   test    TED dev2010 + TEDX dev2012 + TED tst2010..tst2012 (6,750 sentences); with
#           --test-sets elbayad2018: TED dev2010 + tst2010..tst2013 (6,578, Elbayad et al. 2018),
#           tst2013 being the IWSLT'15 release's IWSLT15.TED.tst2013.de-en.{de,en}.xml, put in
#           $ORIG_DIR/iwslt14/de-en or given with --extra-test-dir DIR
#   joint BPE with 10,000 merges (--bpe-merges N; Elbayad et al. 2018: 14,000)
#   scripts/prepare-iwslt14.sh [SRC TGT] [flags]        SRC TGT: de en (default) or en de
# Flags go to `python -m ran_text.prepare iwslt14` (--bpe-merges, --out, --force, ...).
# The archive (wit3's 2014-01 de-en.tgz, from fairseq's mirror) is downloaded with curl or wget
# to $ORIG_DIR/iwslt14 (default work/orig); output: data-bin/iwslt14.SRC-TGT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
orig=${ORIG_DIR:-$root/work/orig}
. "$root/scripts/lib.sh"

pair "IWSLT'14 German-English" de en "$@"
set -- "${pair_args[@]}"

# wit3.fbk.eu, the original host, is gone; fairseq's script now fetches this copy.
fetch_unpack "iwslt14/de-en.tgz https://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"
tags=$(find_one "$orig/iwslt14/de-en" train.tags.de-en.de)

exec "$python" -m ran_text.prepare iwslt14 --orig-dir "$(dirname "$tags")" \
    --src "$src" --tgt "$tgt" --out "$root/data-bin/iwslt14.$src-$tgt" "$@"
