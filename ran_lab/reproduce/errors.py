"""The engine's error."""
from ..common import LabError


class ReproError(LabError):
    """A problem with the input or a failed step; the message names it and what to change."""
