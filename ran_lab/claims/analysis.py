"""Threshold claims: a measure read from a committed file, tested against the claim's limit.

A threshold claim has a ``measure`` (what to read) and ``tests`` (``{"label", "system", "op",
"limit"}``, or ``"times": f, "of": other`` for a limit of f times the other system's value). A
file named ``results/...`` or ``configs/...`` is read from the repository, any other name from the
results folder the report is for; a file that is absent leaves the claim not run there. Measures:

- ``histogram_share`` (``file``: an attention-weight histogram CSV with system, side, layer, lo,
  hi, count; ``side``: enc or dec; ``below``): the share of a system's attention weights below
  ``below``, over every layer of that side.
- ``length_bins`` (``file``: a BLEU-by-length CSV with system, bin, sentences, bleu, and
  optionally ``by``; ``min_sentences``: bins with fewer sentences are left out; ``skip_last``:
  leave out the longest bin): the smallest difference in BLEU, system minus ``of``, over the bins.
- ``bench`` (``files``: bench.json files of ``scripts/bench.py``, globs allowed; ``metric``:
  ``decode_tokens_per_s``, the system's decoding tokens/s over the baseline's, or ``train_time``,
  the baseline's training tokens/s over the system's; ``passes``: ``mean`` to take the mean time
  of the timed decoding passes rather than bench.json's median; ``aggregate``: median, min or max
  over the files; a test may name its own ``files`` and ``aggregate``): the ratio, with the device
  each file names.
- ``params`` (the folder's results.json): the system's parameter count over ``of``'s.
- ``entropy`` (``file``: a CSV of ``scripts/analyze-ran.py entropy`` with system, side, layer,
  entropy; ``side``: enc or dec; ``stat``: ``mean``, the mean attention entropy over the side's
  layers, or ``last_minus_first``, the last layer's minus the first's): a test may name its own
  ``side`` and ``stat``.
- ``js`` (``file``: a CSV of ``scripts/analyze-ran.py js`` with system, side, layer_a, layer_b,
  js; ``side``; ``pairs``: ``adjacent``, the mean Jensen-Shannon divergence over the side's pairs
  of adjacent layers, or ``all``, over every pair of distinct layers): a test may name its own
  ``side``, and ``of_side`` for the side of the system it is compared with (``of``).
- ``none`` (``why``): a claim this project has no measurement for; it is not run.
"""
import csv
import glob
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from .rule import NOT_RUN, Test, threshold

AGGREGATES = {"median": statistics.median, "min": min, "max": max}


@dataclass
class Measured:
    """A threshold claim's result: the verdict, each test, what the values are (``unit``), the
    files read and the devices they name, and per-bin details where the measure has bins."""
    verdict: str
    tests: List[Test]
    unit: str
    files: List[str]
    devices: List[str] = field(default_factory=list)
    details: Dict[str, str] = field(default_factory=dict)


def resolve(name: str, folder: Path, repo: Path) -> Path:
    return repo / name if name.split("/")[0] in ("results", "configs") else folder / name


def shown(path: Path, repo: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(repo.resolve()))
    except ValueError:
        return str(path)


def _histogram(path: Path, side: str, below: float) -> Dict[str, float]:
    total, low = defaultdict(int), defaultdict(int)
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if row["side"] != side:
                continue
            total[row["system"]] += int(row["count"])
            if float(row["hi"]) <= below + 1e-12:
                low[row["system"]] += int(row["count"])
    return {s: low[s] / total[s] for s in total if total[s]}


def _length_bins(path: Path, by: Optional[str], min_sentences: int):
    bins = defaultdict(dict)
    order: List[str] = []
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if by is not None and row.get("by") != by:
                continue
            if int(row["sentences"]) < min_sentences or row["bleu"] == "":
                continue
            bins[row["system"]][row["bin"]] = float(row["bleu"])
            if row["bin"] not in order:
                order.append(row["bin"])
    return bins, order


def _decode_speed(system: dict, passes: str) -> float:
    """Decoding tokens/s: bench.json's own figure (the median pass), or the generated tokens over
    the mean time of the timed passes (``passes`` = "mean")."""
    decode = system.get("decode", {})
    if passes == "mean" and decode.get("pass_seconds"):
        return decode["generated_tokens"] / statistics.fmean(decode["pass_seconds"])
    return system["metrics"]["decode_tokens_per_s"]


def _bench(paths: List[Path], metric: str, baseline: Optional[str], passes: str = "median"):
    """Per file: {system: ratio}, and the device it names."""
    out = []
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        systems = {s["name"]: s for s in report["systems"]}
        metrics = {name: s["metrics"] for name, s in systems.items()}
        base = report["settings"].get("baseline", baseline) if baseline is None else baseline
        machine = report.get("machine", {})
        device = machine.get("device_name") or machine.get("device") or "unknown device"
        if machine.get("device") == "cpu" and machine.get("threads"):
            device = f"{device} (CPU, {machine['threads']} threads)"
        ratios = {}
        for name, m in metrics.items():
            if metric == "train_time":
                ratios[name] = metrics[base]["train_tokens_per_s"] / m["train_tokens_per_s"]
            else:
                ratios[name] = (_decode_speed(systems[name], passes) /
                                _decode_speed(systems[base], passes))
        out.append((ratios, device))
    return out


def _glob(names, folder, repo) -> List[Path]:
    found = []
    for name in names:
        found += sorted(Path(p) for p in glob.glob(str(resolve(name, folder, repo))))
    return found


class _Reader:
    """One measure's reader: ``value(test, system)`` for a test's system (or the system its limit
    is a factor of), and what it read: ``files``, ``devices``, per-test ``details``."""
    unit = ""

    def __init__(self, m: dict, folder: Path, repo: Path, results: Optional[dict]):
        self.m, self.folder, self.repo = m, folder, repo
        self.files: List[str] = []
        self.devices: List[str] = []
        self.details: Dict[str, str] = {}
        self.missing: List[str] = []
        self.setup(results)

    def setup(self, results):
        pass

    def side(self, test, of=False) -> str:
        """The side a test reads: its own ``side`` (``of_side`` for the system it is compared
        with), else the measure's."""
        side = test.get("side", self.m.get("side"))
        return test.get("of_side", side) if of else side

    def path(self) -> Path:
        path = resolve(self.m["file"], self.folder, self.repo)
        self.files.append(shown(path, self.repo))
        if not path.is_file():
            self.missing.append(shown(path, self.repo))
        return path


class _HistogramShare(_Reader):
    unit = "%"

    def setup(self, results):
        path = self.path()
        self.shares = _histogram(path, self.m["side"], self.m["below"]) if path.is_file() else {}

    def value(self, test, system, of=False):
        return self.shares.get(system)


class _LengthBins(_Reader):
    unit = "BLEU"

    def setup(self, results):
        path = self.path()
        self.bins, self.order = (_length_bins(path, self.m.get("by"),
                                              self.m.get("min_sentences", 1))
                                 if path.is_file() else ({}, []))
        if self.m.get("skip_last") and self.order:
            self.order = self.order[:-1]

    def value(self, test, system, of=False):
        of, bins = test["of"], self.bins
        if system not in bins or of not in bins:
            return None
        diffs = [(b, bins[system][b] - bins[of][b]) for b in self.order
                 if b in bins[system] and b in bins[of]]
        if not diffs:
            return None
        self.details[f"{system} − {of}"] = ", ".join(
            f"{b}: " + f"{d:+.2f}".replace("-", "−") for b, d in diffs)
        return min(d for _, d in diffs)


class _Params(_Reader):
    unit = "×"

    def setup(self, results):
        self.params = {}
        for r in (results or {}).get("results", []):
            self.params.setdefault(r["system"], r.get("params"))
        self.files.append("results.json")

    def value(self, test, system, of=False):
        mine, other = self.params.get(system), self.params.get(test["of"])
        return None if mine is None or other is None else mine / other


class _Bench(_Reader):
    unit = "×"

    def value(self, test, system, of=False):
        m = self.m
        paths = _glob(test.get("files", m["files"]), self.folder, self.repo)
        measured = _bench(paths, m["metric"], m.get("baseline"), m.get("passes", "median"))
        for p, (_, device) in zip(paths, measured):
            if shown(p, self.repo) not in self.files:
                self.files.append(shown(p, self.repo))
            if device not in self.devices:
                self.devices.append(device)
        ratios = [r[system] for r, _ in measured if system in r]
        if not ratios:
            return None
        aggregate = test.get("aggregate", m.get("aggregate", "median"))
        if len(ratios) > 1 and system == test["system"]:
            self.details[test["label"]] = f"{aggregate} of " + ", ".join(f"{r:.2f}" for r in ratios)
        return AGGREGATES[aggregate](ratios)


def _rows(path: Path) -> List[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


class _Entropy(_Reader):
    """Fig. 4's measure: per layer, the attention entropy (Eq. 5) averaged over queries and heads;
    a system's side is its layers in order."""
    unit = "nats"

    def setup(self, results):
        path = self.path()
        self.layers = defaultdict(dict)
        for row in _rows(path) if path.is_file() else []:
            self.layers[(row["system"], row["side"])][int(row["layer"])] = float(row["entropy"])

    def value(self, test, system, of=False):
        layers = self.layers.get((system, self.side(test, of)))
        if not layers:
            return None
        stat = test.get("stat", self.m.get("stat", "mean"))
        if stat == "last_minus_first":
            return layers[max(layers)] - layers[min(layers)]
        return statistics.fmean(layers.values())


class _JS(_Reader):
    """Fig. 7's measure: the Jensen-Shannon divergence between the attention of two layers of a
    side, averaged over the pairs ``pairs`` names."""
    unit = "nats"

    def setup(self, results):
        path = self.path()
        self.pairs = defaultdict(dict)
        for row in _rows(path) if path.is_file() else []:
            a, b = int(row["layer_a"]), int(row["layer_b"])
            if a < b:
                self.pairs[(row["system"], row["side"])][(a, b)] = float(row["js"])

    def value(self, test, system, of=False):
        pairs = self.pairs.get((system, self.side(test, of)))
        if not pairs:
            return None
        if self.m.get("pairs", "adjacent") == "adjacent":
            pairs = {k: v for k, v in pairs.items() if k[1] - k[0] == 1}
        return statistics.fmean(pairs.values()) if pairs else None


READERS = {"histogram_share": _HistogramShare, "length_bins": _LengthBins, "params": _Params,
           "bench": _Bench, "entropy": _Entropy, "js": _JS}


def measure(claim: dict, folder: Path, repo: Path, results: Optional[dict] = None) -> Measured:
    """Read the claim's measure and run its tests; ``results``: the folder's results.json."""
    m = claim["measure"]
    if m["kind"] == "none":
        return Measured(NOT_RUN, [], "", [], details={"why": m["why"]})
    reader = READERS[m["kind"]](m, Path(folder), Path(repo), results)
    done = []
    for t in claim["tests"]:
        value = reader.value(t, t["system"])
        if "times" in t:
            base = reader.value(t, t["of"], of=True)
            limit = None if base is None else t["times"] * base
        else:
            limit = t["limit"]
        signed = m["kind"] == "length_bins" or \
            t.get("stat", m.get("stat")) == "last_minus_first"
        done.append(Test(t["label"], value if limit is not None else None, t["op"],
                         limit if limit is not None else float("nan"), signed=signed))
    details = dict(reader.details)
    if reader.missing and all(t.value is None for t in done):
        details["why"] = "no committed " + ", ".join(f"`{f}`" for f in reader.missing)
    return Measured(threshold(done), done, reader.unit, reader.files, reader.devices, details)
