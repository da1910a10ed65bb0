"""Data preparation: raw parallel corpora -> Moses tokens -> joint BPE -> fairseq data-bin.

``corpora`` reads raw corpus formats (plain/gzipped text, WMT .sgm, IWSLT .xml and train.tags);
``prepare`` is the pipeline and its command line (``python -m ran_fairseq.data.prepare``,
``ran-prepare``), a package with one module per stage; ``tokenization`` gives a data-bin's
tokenization options to fairseq-interactive. Nothing is imported here.
"""
