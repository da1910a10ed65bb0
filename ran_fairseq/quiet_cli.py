"""``python -m ran_fairseq.quiet_cli MODULE ARGS...`` runs ``python -m fairseq_cli.MODULE ARGS...``
(train, generate, interactive, preprocess, validate, ...) with the plugin imported first, so that
importing fairseq prints none of the noise ``ran_fairseq.quiet`` silences; fairseq's own log lines
and every other warning are as they would be. The reproduction engine runs fairseq this way.
"""
import logging
import runpy
import sys


class _DropUserDirNotice(logging.Filter):
    """fairseq's note that the --user-dir plugin is already imported (here it always is)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "has already been imported" not in str(record.msg)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: python -m ran_fairseq.quiet_cli MODULE [ARGS...]   (MODULE: a module "
                 "of fairseq_cli: train, generate, interactive, preprocess, validate, ...)")
    logging.getLogger("fairseq.utils").addFilter(_DropUserDirNotice())
    module = f"fairseq_cli.{argv[0]}"
    sys.argv = [module, *argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
