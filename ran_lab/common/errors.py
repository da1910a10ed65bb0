"""The lab's one error: a problem with the input of a lab tool or a step that failed, in one line
that names it and what to change. It is ran_text's :class:`~ran_text.textio.FileFault`, so that a
command ends with that line alike for a file it cannot read and for a refused input."""
from ran_text.textio import FileFault as LabError

__all__ = ["LabError"]
