"""The base of the lab's input errors."""


class LabError(Exception):
    """A problem with the input of a lab tool; the message names it and what to change."""
