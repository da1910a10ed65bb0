"""Writes the option table of each model's page (docs/<model>.md) from its config dataclass:
flag, the default of ``--arch <model>``, choices and help. tests/unit/test_options.py checks
that the pages hold these tables.

    python scripts/option_tables.py
"""
import argparse
import dataclasses
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
MODELS = ("ran_transformer", "recurrent_cross_transformer", "rnnsearch_dynmem",
          "pervasive_attention")
HEADER = "| flag | default | choices | meaning |"
_DEFAULT = re.compile(r"; default (.+)$")


def own_fields(model):
    """The fields of ``model``'s config dataclass that the plugin declares (not fairseq's
    transformer options, not the options version)."""
    from fairseq.models import MODEL_REGISTRY

    from ran_fairseq.models._common import PluginConfig, TransformerFlags

    config = MODEL_REGISTRY[model].config_class()
    inherited = {f.name for f in dataclasses.fields(
        TransformerFlags if issubclass(config, TransformerFlags) else PluginConfig)}
    return [f for f in dataclasses.fields(config) if f.name not in inherited
            and not f.name.startswith("_")]


def rows(model):
    """``[(flag, default, choices, meaning)]`` of ``model``'s options, as the table shows them."""
    from fairseq.models import MODEL_REGISTRY

    from ran_fairseq.models._common import choices_of, flag_of

    cls = MODEL_REGISTRY[model]
    base = cls.resolve_args(argparse.Namespace(arch=model, options_version=cls.OPTIONS_VERSION))
    table = []
    for f in own_fields(model):
        help = f.metadata["help"].replace("; set by --arch", "")
        stated = _DEFAULT.search(help)
        help = _DEFAULT.sub("", help)
        value = getattr(base, f.name)
        default = f"`{stated.group(1)}`" if stated and f.default is None else \
            "off" if value is False else f"`{value}`"
        choices = ", ".join(f"`{c}`" for c in choices_of(f) or ())
        table.append((f"`{flag_of(f.name)}`", default, choices, help.replace("|", "\\|")))
    return table


def table(model):
    lines = [HEADER, "|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows(model)]
    return "\n".join(lines)


def written(model):
    """The table as docs/<model>.md holds it (the lines from the header to the first that is not
    a table row)."""
    lines = (DOCS / f"{model}.md").read_text().splitlines()
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end]), start, end


def main():
    import ran_fairseq  # noqa: F401  (registers the models)

    for model in MODELS:
        old, start, end = written(model)
        lines = (DOCS / f"{model}.md").read_text().splitlines(keepends=True)
        new = table(model)
        if new != old:
            lines[start:end] = [line + "\n" for line in new.splitlines()]
            (DOCS / f"{model}.md").write_text("".join(lines))
            print(f"docs/{model}.md: option table rewritten")


if __name__ == "__main__":
    main()
