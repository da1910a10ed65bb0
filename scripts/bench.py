#!/usr/bin/env python3
"""Speed, memory and size benchmark of fairseq translation systems on one binarized data set.

A systems file (JSON) lists the systems: ``{"baseline": NAME, "common_flags": [...], "systems":
[{"name": ..., "arch": ..., "flags": [...]}, ...]}``, where flags are fairseq-train flags. Each
system runs in its own worker subprocess (``python -m ran_lab.bench.worker SPEC``), so
peak memory and fairseq's registries belong to that system alone. The worker builds task, model,
criterion and ``fairseq.trainer.Trainer`` exactly as fairseq-train does, times
``--train-updates`` calls of ``Trainer.train_step`` after ``--warmup-updates`` untimed ones, then
times beam search (``task.build_generator`` + ``task.inference_step``) over the first
``--decode-sentences`` sentences of ``--gen-subset``.

Figures per system: parameter count; training target tokens/s (``sample["ntokens"]``); decoding
sentences/s and generated tokens/s (top hypothesis lengths, EOS included, as fairseq-generate
counts them); peak memory of training and of decoding (CUDA: ``max_memory_allocated``; CPU: the
resident set high-water mark) and its increment over the memory in use when the phase began.
The parent writes ``OUT/bench.json`` and ``OUT/bench.md`` (every figure also as a ratio to the
baseline system; a path inside the checkout written relative to it) and prints the table.
``--decode-breakdown`` adds one more decoding pass with timers around the encoder, the decoder
layers' parts, the output projection and the cache reorder, and a second table of each part's
share of that pass.

    python scripts/bench.py --data data-bin/multi30k.de-en \
        --systems configs/bench/foundation.json --out bench-out/foundation

``--checkpoint PATTERN`` decodes trained weights: each system's model, built from its flags and
timed in training as usual, takes the weights of PATTERN with ``{system}`` replaced by the
system's result folder name (e.g. ``checkpoints/ran/de-en/{system}/seed1/checkpoint_best.pt``, a
reproduction's layout) before decoding; a system without such a file is an error.
``--sweep-batch-sizes`` and ``--sweep-beams`` (Zeng et al. 2021, Fig. 3) run the benchmark once per
batch size (at ``--beam``) and once per beam size (at ``--decode-batch-size``), each into
OUT/batch-N or OUT/beam-K, and write OUT/speed-sweep.csv and OUT/speed-sweep.png: decoding
tokens/s per system, from the mean time of the ``--decode-repeats`` passes (the paper averages 3
runs).

    python scripts/bench.py --data data-bin/multi30k.de-en --systems configs/ran/systems.json \
        --train-flags-of configs/ran/cpu.json \
        --systems-only RAN-ALL --checkpoint 'checkpoints/ran/de-en/{system}/seed1/checkpoint_best.pt' \
        --train-updates 1 --warmup-updates 0 --decode-sentences 500 --decode-repeats 3 \
        --beam 4 --decode-batch-size 100 --sweep-batch-sizes 1 10 25 50 100 200 \
        --sweep-beams 1 2 4 8 12 --out results/ran/analysis/speed
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_lab.bench.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
