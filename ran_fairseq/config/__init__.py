"""The Hydra configs of the plugin's models, one YAML per model (docs/hydra.md), installed with the
package. ``python -m ran_fairseq.config`` prints their folder, the ``--config-dir`` of
fairseq-hydra-train wherever and however the package is installed (from a checkout's root,
``--config-dir ran_fairseq/config`` names the same folder)::

    fairseq-hydra-train --config-dir "$(python -m ran_fairseq.config)" \\
        --config-name ran_transformer task.data=DATA common.user_dir="$(python -m ran_fairseq)"
"""
from pathlib import Path

DIR = Path(__file__).resolve().parent


def names():
    """The config names (``--config-name``) of the models, sorted."""
    return sorted(path.stem for path in DIR.glob("*.yaml"))
