"""``python -m ran_fairseq.config`` prints the folder of the plugin's Hydra configs, the
``--config-dir`` of fairseq-hydra-train (docs/hydra.md)."""
from . import DIR

print(DIR)
