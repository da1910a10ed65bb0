"""Every module in this package defines and registers one fairseq model; importing the package
imports them all, so a new architecture joins the plugin by adding its file here."""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
