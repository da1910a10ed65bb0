"""Translate raw text as the data pipeline tokenized the training data.

``ran_text.prepare`` tokenizes with sacremoses without aggressive dash splits (unless
``--aggressive-dash-splits``) and never escapes special characters, whereas fairseq's
``--tokenizer moses`` splits dashes and escapes by default. A data-bin's ``prepare-stamp.json``
records the options it was built with; this module turns them into the fairseq options that
reproduce that tokenization at translation time:

    python -m ran_text.tokenization DATA     # flags for fairseq-interactive / -generate
    translation_options(DATA)                        # keyword arguments for from_pretrained

The plugin's models use ``translation_options`` as defaults in ``from_pretrained`` (``ran_fairseq.hub``).
What fairseq's tokenizer cannot do (lowercasing, punctuation normalization) is reported by
``unreproduced``: do it to the input yourself.
"""
import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional

from ran_text import textio

STAMP = "prepare-stamp.json"  # the name ran_text.prepare writes


class NoRecordError(FileNotFoundError):
    """The directory has no readable ``prepare-stamp.json``: it was not made by the pipeline."""


def recorded_options(data_dir) -> dict:
    """The processing options recorded in ``data_dir/prepare-stamp.json``."""
    path = Path(data_dir) / STAMP
    try:
        stamp = textio.read_json(path, "the data-bin's stamp")
        options = stamp["options"]
        options["src"], options["tgt"]  # noqa: B018  (both are required)
    except FileNotFoundError:
        raise NoRecordError(f"{path} not found: {data_dir} was not made by ran_text.prepare "
                            "(scripts/prepare-*.sh), so how its text was tokenized is not "
                            "recorded; pass fairseq's tokenizer flags yourself") from None
    except textio.BadTextFile as e:
        raise NoRecordError(f"{e}; rebuild the data-bin with ran_text.prepare --force") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise NoRecordError(f"{path} is unreadable or has no options ({e}); rebuild the data-bin "
                            "with ran_text.prepare --force") from None
    return options


def translation_options(data_dir, options: Optional[dict] = None) -> Dict[str, object]:
    """fairseq options (``from_pretrained`` keyword arguments) that tokenize and segment raw text
    as the pipeline did for ``data_dir``: the language pair, Moses with the pipeline's dash-split
    setting and without escaping, and the data-bin's BPE codes (none at word level)."""
    o = recorded_options(data_dir) if options is None else options
    result: Dict[str, object] = {
        "source_lang": o["src"], "target_lang": o["tgt"], "tokenizer": "moses",
        # the pipeline calls sacremoses with aggressive_dash_splits=<option>, escape=False
        "moses_no_dash_splits": not o.get("aggressive_dash_splits", False),
        "moses_no_escape": True,
    }
    if o.get("bpe_merges", 0) > 0:
        result["bpe"] = "subword_nmt"
        result["bpe_codes"] = str(Path(data_dir) / "code")
    return result


def fairseq_flags(data_dir, options: Optional[dict] = None) -> List[str]:
    """``translation_options`` as command-line flags of fairseq-interactive / fairseq-generate."""
    o = translation_options(data_dir, options)
    flags = ["-s", str(o["source_lang"]), "-t", str(o["target_lang"]), "--tokenizer", "moses"]
    if o["moses_no_dash_splits"]:
        flags.append("--moses-no-dash-splits")
    if o["moses_no_escape"]:
        flags.append("--moses-no-escape")
    if "bpe" in o:
        flags += ["--bpe", str(o["bpe"]), "--bpe-codes", str(o["bpe_codes"])]
    return flags


def unreproduced(data_dir, options: Optional[dict] = None) -> List[str]:
    """What the pipeline did to the training text that fairseq's tokenizer will not do to input."""
    o = recorded_options(data_dir) if options is None else options
    notes = []
    if o.get("normalize_punct"):
        notes.append("the training text was punctuation-normalized (--normalize-punct): normalize "
                     "input with sacremoses' MosesPunctNormalizer first")
    if o.get("lowercase"):
        notes.append("the training text was lowercased (--lowercase): lowercase input first")
    return notes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ran_text.tokenization",
        description="Print the fairseq-interactive / fairseq-generate flags (or, with --json, the "
                    "from_pretrained keyword arguments) that tokenize raw text as the data "
                    "pipeline tokenized DATA's training text.")
    p.add_argument("data", help="a data-bin made by ran_text.prepare")
    p.add_argument("--json", action="store_true", help="print from_pretrained keyword arguments")
    args = p.parse_args(argv)
    try:
        options = recorded_options(args.data)
    except NoRecordError as e:
        print(f"tokenization: {e}", file=sys.stderr)
        return 1
    for note in unreproduced(args.data, options):
        print(f"tokenization: warning: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(translation_options(args.data, options)))
    else:
        print(shlex.join(fairseq_flags(args.data, options)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
