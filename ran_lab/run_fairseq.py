"""``python -m ran_lab.run_fairseq MODULE ARGS...`` runs ``python -m fairseq_cli.MODULE ARGS...``
(train, generate, interactive, preprocess, validate, ...) as the reproduction engine runs fairseq:

- with the plugin loaded as ``ran_lab.plugin.load`` loads it: every fix of
  ``ran_fairseq.fixes.FIXES``, the opt-in ones too, and none of the noise importing fairseq
  prints; fairseq's own log lines and every other warning are as they would be;
- a file fault (a refused or truncated checkpoint, a damaged file) ends it with one line,
  ``fairseq-MODULE: error: ...``, instead of a traceback.
"""
import logging
import runpy
import sys

from ran_text.textio import FileFault
from ran_lab import plugin


class _DropUserDirNotice(logging.Filter):
    """fairseq's note that the --user-dir plugin is already imported (here it always is)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "has already been imported" not in str(record.msg)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: python -m ran_lab.run_fairseq MODULE [ARGS...]   (MODULE: a module "
                 "of fairseq_cli: train, generate, interactive, preprocess, validate, ...)")
    plugin.load()
    logging.getLogger("fairseq.utils").addFilter(_DropUserDirNotice())
    module = f"fairseq_cli.{argv[0]}"
    sys.argv = [module, *argv[1:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except FileFault as error:
        sys.exit(f"fairseq-{argv[0]}: error: {error}")


if __name__ == "__main__":
    main()
