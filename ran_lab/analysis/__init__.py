"""Analyses of trained translation models (Zeng et al. 2021, §4; Elbayad et al. 2018), as library
functions, and their command line.

- :mod:`.checkpoints`: load a fairseq checkpoint and collate teacher-forced batches of a subset.
- :mod:`.attention_stats`: entropy per layer (Fig. 4), JS divergence between layers (Fig. 7).
- :mod:`.histograms`: histograms of self-attention weights per layer (Fig. 5).
- :mod:`.heatmaps`: self-attention weights per layer and head for one sentence length (Fig. 6).
- :mod:`.length_bins`: sacreBLEU per source-length and per target-length bin (Fig. 8).
- :mod:`.alignments`: soft alignments of a model's own translations (Elbayad et al. 2018, Fig. 6).
- :mod:`.results`: a reproduction's hypotheses, references and sources as inputs of the analyses.
- :mod:`.curves`: validation curves of a reproduction (validation loss against updates).
- :mod:`.sweeps`: Elbayad et al. (2018), Figs. 4 and 5: BLEU against d, g and L, BLEU by length.
- :mod:`.plots`: the PNG figures (matplotlib, Agg backend, imported on first use).
- :mod:`.tables`: the CSV files.
- :mod:`.cli`: ``ran-analyze PAPER ...`` (``ran``: Zeng et al.; ``pervasive``: Elbayad et al.).

``scripts/analyze-ran.py`` and ``scripts/analyze-pervasive.py`` are ``ran-analyze`` with its paper
fixed; ``curves`` and ``alignments`` also run as ``python -m ran_lab.analysis.MODULE``.
"""
