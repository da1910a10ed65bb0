"""The lab beside the plugin: how this project proves what the plugin claims. The reproduction
engine (``reproduce``), the verdicts (``claims``), the benchmark (``bench``), the GPU checks
(``gpucheck``), the analyses and ``ran-remake`` run fairseq as a user would, importing the plugin
(``ran_fairseq``) only where they build or load a model; the plugin never imports the lab.
Commands that need neither torch nor fairseq import neither (tests/system/test_package.py).
"""
