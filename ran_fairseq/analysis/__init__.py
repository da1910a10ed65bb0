"""Analyses of trained translation models (Zeng et al. 2021, §4), as library functions.

- :mod:`.checkpoints`: load a fairseq checkpoint (``ran_transformer``, fairseq's ``transformer``,
  any model with recordable attention) and collate teacher-forced batches of a data-bin subset.
- :mod:`.attention_stats`: attention entropy per layer (Fig. 4, Eq. 5) and the Jensen-Shannon
  divergence between the attention of every pair of layers (Fig. 7).
- :mod:`.heatmaps`: the attention weights per layer and head for one sentence length (Fig. 6),
  learned matrices for input-independent attention, a data-set average for dot-product attention.
- :mod:`.length_bins`: sacreBLEU per source-length bin for one or more systems (Fig. 8).
- :mod:`.plots` (matplotlib, Agg backend) and :mod:`.tables` (CSV) write the results.

``scripts/analyze-ran.py`` is the command line over these functions.
"""
