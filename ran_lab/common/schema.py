"""One schema per kind of file the lab reads (configs, systems files, paper numbers, a run's
result.json, a folder's results.json, slurm.json, train_finished.json, ...), checked when the
file is read: types, required keys, ranges; a string where a list belongs is refused, never
iterated. A file that does not fit is one line naming the file, the key and what was expected:
``configs/ran/cpu.json: "seeds": expected a list of integers 0..4294967295, found a string "12"``.

The schemas are data built from the small classes below (no dependency: the lab's light commands
start without torch or any validation package). :func:`check` returns the value as read."""
import json
import math

from .errors import LabError

SEED_MAX = 2 ** 32 - 1  # fairseq seeds numpy's generator, which takes 0..2**32-1


def found(value):
    """What the file holds, for an error: 'a string "12"', 'a list', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{json.dumps(value)}"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return "a string " + (text if len(text) < 40 else text[:36] + '..."')
    if isinstance(value, (int, float)):
        return f"the number {json.dumps(value) if math.isfinite(value) else value}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class Invalid(Exception):
    """A value that does not fit: ``key`` (its place in the file) and what was ``expected``."""

    def __init__(self, key, expected, value):
        super().__init__(key, expected)
        self.key, self.expected, self.value = key, expected, value


class Spec:
    description = "a value"

    def check(self, value, key):
        return value

    def fail(self, key, value, expected=None):
        raise Invalid(key, expected or self.description, value)


class Any(Spec):
    pass


class Str(Spec):
    """A string; ``choices``: the allowed ones; ``line``: one line, no control character."""

    def __init__(self, choices=None, nonempty=False, line=False):
        self.choices, self.nonempty, self.line = choices, nonempty, line
        shown = ", ".join(json.dumps(c, ensure_ascii=False) for c in choices or ())
        self.description = (f"one of {shown}" if choices else
                            "a non-empty string" if nonempty else "a string")
        if line:
            self.description += " on one line (no newline or control character)"

    def check(self, value, key):
        if not isinstance(value, str) or (self.nonempty and not value.strip()) \
                or (self.choices is not None and value not in self.choices) \
                or (self.line and any(ord(c) < 32 or ord(c) == 127 for c in value)):
            self.fail(key, value)
        return value


class Int(Spec):
    def __init__(self, lo=None, hi=None):
        self.lo, self.hi = lo, hi
        self.description = ("an integer" + (f" {lo}..{hi}" if lo is not None and hi is not None
                                            else f" >= {lo}" if lo is not None else ""))

    def check(self, value, key):
        if isinstance(value, bool) or not isinstance(value, int) \
                or (self.lo is not None and value < self.lo) \
                or (self.hi is not None and value > self.hi):
            self.fail(key, value)
        return value


class Num(Spec):
    """A finite number; ``lo``/``hi``: bounds, ``open``: both bounds excluded."""

    def __init__(self, lo=None, hi=None, open=False):
        self.lo, self.hi, self.open = lo, hi, open
        bounds = (f" in ({lo}, {hi})" if open else f" in [{lo}, {hi}]") \
            if lo is not None and hi is not None else ""
        self.description = f"a finite number{bounds}"

    def check(self, value, key):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            self.fail(key, value)
        if self.lo is not None and (value <= self.lo if self.open else value < self.lo):
            self.fail(key, value)
        if self.hi is not None and (value >= self.hi if self.open else value > self.hi):
            self.fail(key, value)
        return value


class Bool(Spec):
    description = "true or false"

    def check(self, value, key):
        if not isinstance(value, bool):
            self.fail(key, value)
        return value


class Null(Spec):
    description = "null"

    def check(self, value, key):
        if value is not None:
            self.fail(key, value)
        return value


class OneOf(Spec):
    def __init__(self, *options):
        self.options = options
        self.description = " or ".join(o.description for o in options)

    def check(self, value, key):
        for option in self.options:
            try:
                return option.check(value, key)
            except Invalid as e:
                if e.key != key:  # it is of this option's kind, wrong inside
                    raise
        self.fail(key, value)


def Maybe(spec):
    return OneOf(spec, Null())


class List(Spec):
    """A list of ``item``; ``unique``: no item twice; ``unique_by``: keys of its objects that no
    two items share all of (a run's pair, system and seed)."""

    def __init__(self, item, min_len=0, unique=False, unique_by=()):
        self.item, self.min_len, self.unique, self.unique_by = item, min_len, unique, unique_by
        self.description = (f"a {'non-empty ' if min_len else ''}list of "
                            f"{plural(item.description)}")

    def check(self, value, key):
        if not isinstance(value, list) or len(value) < self.min_len:
            self.fail(key, value)
        for i, item in enumerate(value):
            self.item.check(item, f"{key}[{i}]")
        if self.unique and len({json.dumps(v, sort_keys=True) for v in value}) != len(value):
            self.fail(key, value, self.description + ", each once")
        seen = {}
        for i, item in enumerate(value if self.unique_by else ()):
            ident = json.dumps([item.get(k) for k in self.unique_by])
            if ident in seen:
                shown = " ".join(str(item.get(k)) for k in self.unique_by)
                raise Invalid(f"{key}[{i}]", f"each ({', '.join(self.unique_by)}) once: "
                                             f"{shown} is also {key}[{seen[ident]}]", item)
            seen[ident] = i
        return value


class Map(Spec):
    """An object of any keys, each value of ``value``."""

    def __init__(self, value):
        self.value = value
        self.description = f"an object whose values are {plural(value.description)}"

    def check(self, value, key):
        if not isinstance(value, dict):
            self.fail(key, value)
        for k, v in value.items():
            self.value.check(v, f"{key}.{k}" if key else k)
        return value


class Obj(Spec):
    """An object with ``required`` and ``optional`` keys ({name: Spec}); others refused unless
    ``extra`` (a file other versions add fields to)."""

    def __init__(self, required=None, optional=None, extra=False, description="an object"):
        self.required, self.optional = required or {}, optional or {}
        self.extra, self.description = extra, description

    def check(self, value, key):
        if not isinstance(value, dict):
            self.fail(key, value)
        for name, spec in self.required.items():
            if name not in value:
                raise Invalid(self.inner(key, name), f"{spec.description} (a required key, "
                                                     f"missing)", value)
        if not self.extra:
            unknown = sorted(set(value) - set(self.required) - set(self.optional))
            if unknown:
                known = ", ".join(sorted(set(self.required) | set(self.optional)))
                raise Invalid(self.inner(key, unknown[0]), f"no such key (known: {known})",
                              value[unknown[0]])
        for name, spec in {**self.required, **self.optional}.items():
            if name in value:
                spec.check(value[name], self.inner(key, name))
        return value

    @staticmethod
    def inner(key, name):
        return f"{key}.{name}" if key else name


def plural(description):
    """'a string' -> 'strings' (for a list's description)."""
    for one, many in (("a non-empty string", "non-empty strings"), ("a string", "strings"),
                      ("an integer", "integers"), ("a finite number", "finite numbers"),
                      ("an object", "objects")):
        if description.startswith(one):
            return many + description[len(one):]
    return description


def check(value, spec, path, what=None, fix=None, key=""):
    """``value`` (read from the file ``path``, at ``key``) if it fits ``spec``; else a LabError of
    one line: the file (``what`` it is), the key, what was expected and what it holds, and
    ``fix``."""
    try:
        return spec.check(value, key)
    except Invalid as e:
        where = f"{path}" + (f" ({what})" if what else "")
        place = f'"{e.key}"' if e.key else "the file"
        holds = "" if "missing" in e.expected else f", found {found(e.value)}"
        raise LabError(f"{where}: {place}: expected {e.expected}{holds}"
                    + (f"; {fix}" if fix else "")) from None


FLAGS = List(Str())
STRINGS = List(Str())

# configs/PAPER/*.json (as read, its 'base' filled in)
CONFIG = Obj(
    required={"systems": Str(nonempty=True), "paper": Str(nonempty=True),
              "pairs": List(Str(nonempty=True), min_len=1, unique=True),
              "data": Str(nonempty=True), "prepare": Any(),  # ran_lab.reproduce.preparations checks it
              "test_set": Str(), "gen_subset": OneOf(Str(nonempty=True),
                                                     List(Str(nonempty=True), 1, unique=True)),
              "device": Str(choices=("cpu", "cuda")), "out": Str(nonempty=True),
              "checkpoints": Str(nonempty=True),
              "select": Str(choices=("last", "loss", "bleu")),
              "train_flags": FLAGS, "generate_flags": FLAGS},
    optional={"notes": Str(), "bpe": Maybe(Str(choices=("subword_nmt",))),
              "arch": Str(nonempty=True),
              "seeds": List(Int(0, SEED_MAX), min_len=1, unique=True),
              "significance": Obj(optional={"samples": Int(100), "level": Num(0, 1, open=True)}),
              "paper_columns": List(Str()), "set_train_flags": Map(Str()),
              "speed_bench": OneOf(Str(nonempty=True), List(Str(nonempty=True), 1)),
              "continues": Str(nonempty=True), "base": Str(nonempty=True),
              "gpus": Int(0)})  # the paper's GPUs per training (--launcher slurm's default)

# a systems file (configs/PAPER/systems.json, configs/bench/*.json): what every reader relies on;
# the engine and the benchmark then check the fields they know
SYSTEM = Obj(required={"name": Str(nonempty=True, line=True), "arch": Str(nonempty=True)},
             optional={"flags": FLAGS, "generate_flags": FLAGS, "tables": STRINGS,
                       "checkpoint_of": Maybe(Str(nonempty=True)),
                       "postprocess": Any(),  # a step the engine checks
                       "notes": Str()},
             extra=True, description="an object (a system)")
SYSTEMS = Obj(required={"systems": List(SYSTEM, min_len=1)},
              optional={"baseline": Str(nonempty=True), "common_flags": FLAGS, "notes": Str()},
              extra=True)

# the paper's numbers (configs/PAPER/paper.json)
PAPER_COLUMN = Obj(required={"key": Str(nonempty=True), "title": Str(nonempty=True)},
                   optional={"table": Str(), "task": Str(), "metric": Str(),
                             "values": Map(Maybe(OneOf(Num(), Str()))),
                             "significant": STRINGS},
                   extra=True, description="an object (a column)")
PAPER = Obj(required={"columns": List(PAPER_COLUMN)},
            optional={"source": Str(), "status": Str(), "reference_rows": Any()}, extra=True)

# a run's result.json: what tables, rescoring and --resume read of it
SCORE = Num()
SUBSET = Obj(optional={"sacrebleu": SCORE, "chrf": SCORE, "ter": SCORE, "tok_bleu": SCORE,
                       "hyp_file": Str(), "signatures": Map(Str()), "p_value": Maybe(Num(0, 1))},
             extra=True, description="an object (a subset's scores)")
RESULT = Obj(
    required={"pair": Str(nonempty=True), "system": Str(nonempty=True, line=True),
              "seed": Int(0, SEED_MAX), "tok_bleu": SCORE, "sacrebleu": SCORE, "chrf": SCORE,
              "ter": SCORE, "subsets": Map(SUBSET), "commands": Obj(extra=True)},
    optional={"params": Maybe(Int(0)), "params_trained": Maybe(Int(0)),
              "train_seconds": Maybe(Num(0)), "generate_seconds": Maybe(Num(0)),
              "train_words_per_s": Maybe(Num(0)), "train_step_seconds": Maybe(Num(0)),
              "decode": Obj(optional={"sentences": Int(0), "tokens": Int(0), "seconds": Num(0),
                                      "sentences_per_s": Num(0), "tokens_per_s": Num(0)},
                            extra=True),
              "machine": Obj(extra=True), "selected": Obj(extra=True),
              "train_argv": FLAGS, "generate_argv": FLAGS, "flags": FLAGS},
    extra=True)

# a results folder's results.json: its rows are results
RUN_KEY = ("pair", "system", "seed")
RESULTS = Obj(optional={"results": List(RESULT, unique_by=RUN_KEY), "settings": Obj(extra=True),
                        "paper": Obj(extra=True)}, extra=True)

# a checkpoint folder's train_finished.json
TRAIN_FINISHED = Obj(required={"argv": FLAGS, "seconds": Num(0)})

# a run folder's slurm.json (its Slurm job)
SLURM = Obj(required={"job_id": OneOf(Int(1), Str(nonempty=True, line=True))}, extra=True)

# a row of a results.json as ran-claims reads it: which run, and its scores where it has them
TABLE_ROW = Obj(required={"pair": Str(nonempty=True), "system": Str(nonempty=True, line=True),
                          "seed": Int(0, SEED_MAX)},
                optional={"tok_bleu": SCORE, "sacrebleu": SCORE, "chrf": SCORE, "ter": SCORE,
                          "subsets": Map(SUBSET)},
                extra=True, description="an object (a run's row)")

# a results folder's results.json as ran-claims reads it: the table's settings and its rows
TABLE_DATA = Obj(
    required={"settings": Obj(required={"baseline": Str(nonempty=True),
                                        "paper_file": Str(nonempty=True),
                                        "significance": Obj(required={
                                            "samples": Int(1), "level": Num(0, 1, open=True)},
                                            extra=True)},
                              optional={"pairs": List(Str()), "systems": List(Str()),
                                        "seeds": List(Int(0, SEED_MAX)),
                                        "subsets": List(Str(), min_len=1),
                                        "not_run": Maybe(List(Str()))},
                              extra=True),
              "results": List(TABLE_ROW, unique_by=RUN_KEY)},
    extra=True)

# a paper's claims file (configs/PAPER/claims.json): its shape and each claim's (with the
# defaults applied) and measure's; ran_lab.claims.spec checks what a relation needs
NAMED = Str(nonempty=True)
CLAIMS = Obj(required={"paper": NAMED,
                       "claims": List(Obj(extra=True, description="an object (a claim)"))},
             optional={"paper_file": NAMED, "defaults": Obj(extra=True),
                       "seed_variance": Map(Obj(required={"from": NAMED, "why": NAMED})),
                       "weak_baselines": Map(List(Obj(required={"system": NAMED,
                                                                "why": NAMED})))},
             extra=True)
SIDE = Str(choices=("enc", "dec"))
STAT = Str(choices=("mean", "last_minus_first"))
CLAIM = Obj(
    required={"id": NAMED, "where": NAMED, "claim": NAMED,
              "relation": Str(choices=(">", "<", "≈", "≥", "≤", "order", "threshold"))},
    optional={"system": NAMED, "systems": List(NAMED, min_len=1), "against": NAMED,
              "groups": List(List(NAMED, min_len=1)),
              "metric": Str(choices=("sacrebleu", "ter")), "subset": Str(choices=("test", "valid")),
              "pairs": List(NAMED, min_len=1), "paper": List(Obj(
                  required={"label": Str(), "values": Map(Any())},
                  optional={"column": Str(), "text": Str()})),
              "note": Str(), "own": Bool(), "measure": Obj(extra=True),
              "tests": List(Obj(required={"label": Str(), "system": NAMED,
                                          "op": Str(choices=("<", "<=", ">", ">="))},
                                optional={"of": NAMED, "limit": Num(), "times": Num(),
                                          "files": Any(), "aggregate": Any(), "side": SIDE,
                                          "of_side": SIDE, "stat": STAT}), min_len=1),
              "margin": Obj(required={"value": Num(0, math.inf), "why": NAMED}),
              "size": Obj(optional={"text": Str(), "value": Any(), "values": Map(Any()),
                                    "test": Str(choices=("inside", "at_least", "at_most")),
                                    "comparable": Bool()}),
              "same_as": NAMED, "checkpoints": NAMED, "by_construction": NAMED},
    description="an object (a claim)")
# a threshold claim's measure, by its kind
MEASURES = {
    "histogram_share": Obj(required={"kind": Str(), "file": NAMED},
                           optional={"side": Any(), "below": Any()}),
    "length_bins": Obj(required={"kind": Str(), "file": NAMED},
                       optional={"by": Any(), "min_sentences": Any(), "skip_last": Any()}),
    "bench": Obj(required={"kind": Str(), "metric": Str(choices=("decode_tokens_per_s",
                                                                 "train_time"))},
                 optional={"files": Any(), "baseline": Any(), "aggregate": Any(),
                           "passes": Any()}),
    "params": Obj(required={"kind": Str()}),
    "entropy": Obj(required={"kind": Str(), "file": NAMED, "side": SIDE}, optional={"stat": STAT}),
    "js": Obj(required={"kind": Str(), "file": NAMED, "side": SIDE},
              optional={"pairs": Str(choices=("adjacent", "all"))}),
    "none": Obj(required={"kind": Str(), "why": NAMED}),
}

# results/REMAKE.json: the table folders, each with the paper and the options that remake it;
# ran_lab.remake checks the paper, the config and the names
REMAKE = List(Obj(required={"folder": Str(nonempty=True, line=True),
                            "paper": Str(nonempty=True, line=True),
                            "config": Str(nonempty=True, line=True),
                            "pairs": List(Str(nonempty=True, line=True), min_len=1, unique=True),
                            "systems": List(Str(nonempty=True, line=True), min_len=1,
                                            unique=True),
                            "seeds": List(Int(0, SEED_MAX), min_len=1, unique=True),
                            "threads": Int(1), "jobs": Int(1)},
                  optional={"note": Str()}, description="an object (a table folder)"))

# configs/leaderboard/board.json: the board's plan; ran_lab.leaderboard.board checks that
# seeds_of and cost name directions of seeds
SEEDS = List(Int(0, SEED_MAX), min_len=1, unique=True)
BOARD = Obj(required={"config": Str(nonempty=True), "page": Str(nonempty=True),
                      "seeds": Map(SEEDS),
                      "cost": Obj(required={"pair": Str(nonempty=True), "seed": Int(0, SEED_MAX),
                                            "train_updates": Int(1),
                                            "threads": List(OneOf(Int(1), Str(choices=("all",))),
                                                            min_len=1)})},
            optional={"seeds_of": Map(Map(List(Int(0, SEED_MAX), unique=True))),
                      "why": Map(Str())})
