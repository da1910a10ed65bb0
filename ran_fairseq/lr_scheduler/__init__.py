"""Every module in this package registers one fairseq learning-rate scheduler when imported;
importing the package imports them all."""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
