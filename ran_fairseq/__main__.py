"""``python -m ran_fairseq`` prints the directory to pass to fairseq's ``--user-dir``, wherever and
however the package is installed (editable or not)::

    fairseq-train DATA --user-dir "$(python -m ran_fairseq)" --arch ...

(``python -m ran_fairseq.config`` prints the folder of the models' YAMLs, fairseq-hydra-train's
``--config-dir``.)
"""
from pathlib import Path

print(Path(__file__).resolve().parent)
