"""Analyses of trained translation models (Zeng et al. 2021, §4; Elbayad et al. 2018), as library
functions.

- :mod:`.checkpoints`: load a fairseq checkpoint (``ran_transformer``, fairseq's ``transformer``,
  any model with recordable attention) and collate teacher-forced batches of a data-bin subset.
- :mod:`.attention_stats`: attention entropy per layer (Fig. 4, Eq. 5) and the Jensen-Shannon
  divergence between the attention of every pair of layers (Fig. 7).
- :mod:`.heatmaps`: the attention weights per layer and head for one sentence length (Fig. 6),
  learned matrices for input-independent attention, a data-set average for dot-product attention.
- :mod:`.histograms`: histograms of self-attention weights per layer (Fig. 5).
- :mod:`.length_bins`: sacreBLEU per source-length bin for one or more systems (Fig. 8).
- :mod:`.alignments`: soft alignments of a model's own translations (Elbayad et al. 2018, Fig. 6).
- :mod:`.results`: a reproduction's outputs (hypotheses, references, sources) as inputs of the
  analyses.
- :mod:`.curves`: validation curves of a reproduction (validation loss against updates).
- :mod:`.sweeps`: Elbayad et al. (2018), Figs. 4 and 5 from a reproduction's results: BLEU
  against one hyper-parameter of Pervasive Attention at a time, and BLEU by source length.
- :mod:`.plots` (matplotlib, Agg backend) and :mod:`.tables` (CSV) write the results.

``scripts/analyze-ran.py`` and ``scripts/analyze-pervasive.py`` are the command lines over these
functions; ``curves`` and ``alignments`` also run as ``python -m ran_fairseq.analysis.MODULE``.
"""
