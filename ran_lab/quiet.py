"""No import noise: the lines that importing fairseq 0.12 (and hydra through it) prints on every
command, and nothing else.

``install()`` adds, before fairseq is imported, a logging filter and warnings filters that each
match one known message exactly:

- ``Please install tensorboardX`` (``fairseq.tasks.text_to_speech``, logged at import; fairseq
  does not use tensorboardX here);
- hydra's deprecation UserWarnings, raised each time fairseq turns its arguments into a config:
  ``hydra.experimental.initialize()/compose() is no longer experimental``, ``The version_base
  parameter is not specified``, ``Usage of deprecated keyword in package header``, ``... is
  validated against ConfigStore schema with the same name`` and ``The strict flag in the compose
  API is deprecated``;
- the ``invalid escape sequence`` warning of fairseq's wav2vec sources (a SyntaxWarning from
  Python 3.12, a DeprecationWarning before), raised when they are compiled.

``library_logging()`` undoes what fairseq's library modules do to the root logger when they are
imported (``models/wav2vec/wav2vec2_classification.py`` calls ``logging.basicConfig(level=DEBUG)``,
which sends every library's DEBUG lines, hydra's included, to stderr as ``DEBUG:hydra...``), so
that the program's own logging setup (fairseq-train's, say) is the one that holds. Other warnings
and fairseq's own log lines are left as they are. This module imports neither fairseq nor torch.
"""
import contextlib
import logging
import warnings

TENSORBOARDX_LOGGER = "fairseq.tasks.text_to_speech"
TENSORBOARDX_MESSAGE = "Please install tensorboardX"
# (message regex, matched from the start of the warning's text, case-insensitively; category)
HYDRA_WARNINGS = (
    r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental",
    r"\s*The version_base parameter is not specified",
    r"In '[^']*': Usage of deprecated keyword in package header",
    r"\s*'[^']*' is validated against ConfigStore schema with the same name",
    r"\s*The strict flag in the compose API is deprecated",
)
# A compiler warning's "module" is its file name without .py.
WAV2VEC_SOURCES = r".*fairseq[/\\]models[/\\]wav2vec[/\\]"
_installed = False


class _DropTensorboardX(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TENSORBOARDX_MESSAGE)


def install() -> None:
    """Add the filters (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    logging.getLogger(TENSORBOARDX_LOGGER).addFilter(_DropTensorboardX())
    for message in HYDRA_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    for category in (SyntaxWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", message=r"invalid escape sequence", category=category,
                                module=WAV2VEC_SOURCES)


@contextlib.contextmanager
def library_logging():
    """Around the first import of fairseq: keep the root logger's handlers and level as they were
    before it (a program that configured logging first keeps its configuration)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)

