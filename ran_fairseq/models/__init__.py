"""Every module in this package defines and registers one fairseq model; importing the package
imports them all, so a new architecture joins the plugin by adding its file here."""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

# fairseq's hub interface (from_pretrained) for every model of the plugin, defaulting to the
# data-bin's recorded tokenization (ran_fairseq/hub.py).
from fairseq.models import MODEL_REGISTRY  # noqa: E402

from ..hub import add_data_bin_defaults  # noqa: E402

for _cls in set(MODEL_REGISTRY.values()):
    if _cls.__module__.startswith(__name__ + "."):
        add_data_bin_defaults(_cls)
