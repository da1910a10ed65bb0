"""Data preparation: raw parallel corpora -> Moses tokens -> joint BPE -> fairseq data-bin.

``corpora`` reads raw corpus formats (plain/gzipped text, WMT .sgm, IWSLT .xml and train.tags);
``prepare`` is the pipeline and its command line (``python -m ran_fairseq.data.prepare``).
Nothing is imported here, so running ``prepare`` as a module does not load it twice.
"""
