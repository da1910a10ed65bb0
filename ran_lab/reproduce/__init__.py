"""The reproduction engine behind ``ran-reproduce PAPER`` and ``scripts/reproduce-*.sh``: train,
decode and score every system of a paper's config with fairseq's own CLIs, and write the measured
table beside the paper's numbers.

A paper is described by a ``Paper`` (:mod:`.papers`, read from ``configs/PAPER/reproduce.json``:
title, configs, extra columns or measurements) and run by :func:`.cli.main` (``ran-reproduce PAPER
[options]``, ``python -m ran_lab.reproduce PAPER`` or ``scripts/reproduce-PAPER.sh``). A
scale config (JSON, e.g. ``configs/ran/cpu.json``) names the systems file (name, arch, flags and the
paper tables of each system), the paper's numbers, the data and the fairseq flags; no
hyper-parameter lives in a script. For each language pair, system and seed, with the plugin loaded:

1. the config's ``prepare`` command (a no-op when the data-bin is up to date), unless ``--data``;
2. ``fairseq-train DATA --arch ARCH [train_flags] [system flags] --seed N`` into
   CHECKPOINTS/PAIR/SYSTEM/seedN, or nothing for a system that decodes another one's checkpoint
   (``"checkpoint_of"``); the config's ``select`` picks the checkpoint to decode: ``last``, ``loss``
   (fairseq's ``checkpoint_best.pt`` by validation loss) or ``bleu`` (the same, with validation BLEU
   computed by fairseq's ``--eval-bleu`` machinery as the metric);
3. ``fairseq-generate`` on every subset of ``gen_subset`` (a name or a list; the first is the main
   one) with the config's and the system's generate flags, keeping every sentence
   (``--required-batch-size-multiple 1``); a system's ``"postprocess"`` command may then rewrite that
   output (e.g. unknown-word replacement);
4. tokenized BLEU of the hypotheses (BPE removed) against the tokenized reference text the data
   pipeline keeps in the data-bin (``SUBSET.tok.TGT``), so a hypothesis word that a postprocess put in
   place of ``<unk>`` can match; the hypotheses detokenized with fairseq's Moses tokenizer and scored
   against the raw references with sacreBLEU (BLEU, chrF, TER); paired bootstrap resampling
   (sacrebleu's, ``significance.samples``) of each system's sacreBLEU and TER against the
   baseline's on the same pair, subset and seed;
5. parameter count, training speed (fairseq-train's words/s) and wall time, the validation curve and
   the selected checkpoint's epoch and update, and decoding speed (fairseq-generate's own timing line).

Writes OUT/PAIR/SYSTEM/seedN/{train.log, generate[.SUBSET].txt, hyp.detok[.SUBSET].txt, result.json}
(a postprocessed run keeps its decoding as generate[.SUBSET].txt.gz instead, so that
``--redo-postprocess`` (:mod:`.redo`) can postprocess it again without the checkpoint),
OUT/results.json (every result, with settings and machine) and OUT/TABLE.md (mean ± std over seeds
where there are several). What it writes names a path inside the checkout relative to it (its commands
run there), and the logs it keeps have the machine's paths as placeholders (``ran_lab.portable``):
results made in one checkout are taken by ``--resume`` in another.

The modules, in the order of a run: :mod:`.config` (the Paper, the scale config and its systems),
:mod:`.runs` (one run's commands), :mod:`.locks`, :mod:`.store` (stored results, ``--resume`` and
``--force``), :mod:`.schedule` (every run, in order: skipped, redone or launched),
:mod:`.launch` (where a run is made: here, ``--jobs`` at a time, or as a Slurm job; one
interface), :mod:`.execute` (one run's work: :mod:`.training`, decoding, :mod:`.scores`),
:mod:`.process` (the seam to fairseq's processes, ``RUNNER``), :mod:`.checkpoints`, :mod:`.logs`,
:mod:`.table` and :mod:`.markdown` (results.json, TABLE.md), :mod:`.cli`.

Under faults (docs/guarantees.md): each run's output and checkpoint folders are locked while it
runs (a second engine is refused, naming the holder); fairseq's processes live in their own process
groups, get the engine's SIGTERM and SIGINT and end with it; files are written atomically; stored
results and checkpoints made by other commands are not replaced without ``--force``.
"""
# (nothing is imported here: ``python -m ran_lab.reproduce.cli`` runs the command once, and a
# module of the engine is imported by its own name)
