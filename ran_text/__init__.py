"""ran_text: what a user of the plugin runs beside fairseq, needing neither torch nor fairseq.

- ``prepare`` (``ran-prepare``): raw parallel corpora -> Moses tokens -> joint BPE -> a fairseq
  data-bin (fairseq-preprocess runs as a process of its own); ``corpora`` reads the raw formats
  (plain or gzipped text, WMT .sgm, IWSLT .xml and train.tags); ``tokenization`` records a
  data-bin's tokenization for fairseq-interactive and the hub;
- ``evaluate`` (``ran-evaluate``): detokenized fairseq-generate output scored with sacreBLEU
  (BLEU, chrF, TER); ``replace_unk`` and ``unk_dictionary``: unknown-word replacement;
- ``textio``: files written whole or not at all, text read strictly, locks, one-line file errors;
  ``tied``: child processes that end with the process that started them.

The plugin (``ran_fairseq``) and the lab (``ran_lab``) import it; it imports neither.
"""
