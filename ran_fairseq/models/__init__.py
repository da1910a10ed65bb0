"""Registered by importing."""
from . import ran_transformer  # noqa: F401  (registers the model)
