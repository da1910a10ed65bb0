"""Elbayad et al. (2018), Figs. 4 and 5 from a reproduction's results (``scripts/reproduce-*.sh``).

Fig. 4: BLEU against one hyper-parameter of Pervasive Attention at a time: the token embedding size
d = d_s = d_t, the growth rate g and the depth L. ``sweep_rows(results)`` reads the systems whose
``tables`` include ``fig4-d``, ``fig4-g`` or ``fig4-L`` (configs/pervasive/systems-full.json) and
takes each one's value of that parameter from its flags (``--encoder-embed-dim``,
``--growth-rate``, ``--num-layers``), or from its arch's defaults when the flags leave it; BLEU is
the mean and standard deviation (n - 1) of the tokenized BLEU over the seeds of each system.

Fig. 5: BLEU by source length for Pervasive Attention against the baselines:
``length_rows(results_dir, pair, systems, edges)`` scores each seed's detokenized hypotheses
(OUT/PAIR/SYSTEM/seedN/hyp.detok.txt) per source-length bin with
:func:`ran_lab.analysis.length_bins.bleu_by_length` and averages the seeds.
"""
import statistics
from argparse import Namespace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ran_lab.common.paths import repo_path
from ran_text.evaluate import read_lines
from . import length_bins
from ran_text.textio import read_json

PANELS = {"d": ("--encoder-embed-dim", "encoder_embed_dim", "token embedding size d"),
          "g": ("--growth-rate", "growth_rate", "growth rate g"),
          "L": ("--num-layers", "num_layers", "depth L")}
TABLE_PREFIX = "fig4-"


def _flag(flags: Sequence[str], name: str) -> Optional[str]:
    """The last value given to ``name`` in ``flags`` (fairseq's argparse keeps the last)."""
    values = [flags[i + 1] for i, f in enumerate(flags[:-1]) if f == name]
    values += [f.split("=", 1)[1] for f in flags if f.startswith(name + "=")]
    return values[-1] if values else None


def arch_default(arch: str, attribute: str):
    """The value a registered fairseq arch gives ``attribute`` when no flag sets it."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY

    import ran_fairseq  # noqa: F401  (registers the plugin's archs)

    if arch not in ARCH_CONFIG_REGISTRY:
        raise ValueError(f"unknown arch {arch!r} in the results")
    model = MODEL_REGISTRY[ARCH_MODEL_NAME_REGISTRY[arch]]
    if hasattr(model, "resolve_args"):  # the plugin's models: the arch, then the config's defaults
        return getattr(model.resolve_args(Namespace(arch=arch)), attribute)
    args = Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    return getattr(args, attribute)


def _mean_std(values: List[float]):
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def sweep_rows(results: Sequence[dict], pair: Optional[str] = None) -> List[dict]:
    """Rows ``{pair, panel, parameter, value, system, seeds, bleu, bleu_std}`` of Fig. 4, sorted by
    pair, panel and value. ``results``: the ``results`` list of a results.json."""
    groups: Dict[tuple, List[dict]] = {}
    for r in results:
        if pair is not None and r["pair"] != pair:
            continue
        for table in r.get("tables", []):
            if table.startswith(TABLE_PREFIX):
                panel = table[len(TABLE_PREFIX):]
                if panel not in PANELS:
                    raise ValueError(f"system {r['system']!r}: unknown Fig. 4 table {table!r} "
                                     f"(known: {', '.join(TABLE_PREFIX + p for p in PANELS)})")
                groups.setdefault((r["pair"], panel, r["system"]), []).append(r)
    rows = []
    for (pair_, panel, system), runs in groups.items():
        flag, attribute, title = PANELS[panel]
        value = _flag(runs[0]["flags"], flag)
        value = int(value) if value is not None else arch_default(runs[0]["arch"], attribute)
        bleu, std = _mean_std([r["tok_bleu"] for r in runs])
        rows.append({"pair": pair_, "panel": panel, "parameter": title, "value": value,
                     "system": system, "seeds": len(runs), "bleu": bleu, "bleu_std": std})
    if not rows:
        raise ValueError("no result belongs to a Fig. 4 sweep (a system whose tables include "
                         f"{', '.join(TABLE_PREFIX + p for p in PANELS)})")
    order = list(PANELS)
    return sorted(rows, key=lambda r: (r["pair"], order.index(r["panel"]), r["value"]))


def read_results(results_dir) -> dict:
    path = Path(results_dir) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: pass the --out folder of a reproduction (--results)")
    return read_json(path, "a reproduction's table data", shape=dict)


def length_rows(results_dir, pair: str, systems: Sequence[str],
                edges: Sequence[int] = length_bins.DEFAULT_EDGES) -> List[dict]:
    """Rows ``{system, bin, lo, hi, sentences, seeds, bleu, bleu_std}`` of Fig. 5: sacreBLEU per
    source-length bin (words of the raw source) of each system, mean and std over its seeds."""
    from ran_lab.common.paths import slug  # the engine names the result folders

    results_dir = Path(results_dir)
    report = read_results(results_dir)
    src, _, tgt = pair.partition("-")
    texts = {}  # raw reference path -> (references, sources)
    per_seed: Dict[tuple, List[Optional[float]]] = {}
    meta = {}
    for system in systems:
        runs = [r for r in report["results"] if r["pair"] == pair and r["system"] == system]
        if not runs:
            found = sorted({r["system"] for r in report["results"] if r["pair"] == pair})
            raise ValueError(f"{results_dir / 'results.json'} has no result for {system!r} on "
                             f"{pair}; it has {', '.join(found)} (--systems)")
        for r in runs:
            folder = results_dir / pair / slug(system)
            if "seed" in r:
                folder = folder / f"seed{r['seed']}"
            main = next(iter(r["subsets"].values())) if r.get("subsets") else {}
            hyps = read_lines(folder / main.get("hyp_file", "hyp.detok.txt"))
            # recorded paths name this checkout's files relative to it
            ref_path = repo_path(main["raw_ref"]) if "raw_ref" in main else repo_path(
                report["settings"]["data"].format(src=src, tgt=tgt)) / f"test.raw.{tgt}"
            if ref_path not in texts:
                src_path = ref_path.with_name(ref_path.name[:-len(tgt)] + src)
                texts[ref_path] = (read_lines(ref_path), read_lines(src_path))
            if len(texts) > 1:
                raise ValueError(f"the {pair} results were scored against different references: "
                                 f"{', '.join(map(str, texts))}")
            refs, sources = texts[ref_path]
            for row in length_bins.bleu_by_length({system: hyps}, refs, sources, edges):
                key = (system, row["bin"])
                per_seed.setdefault(key, []).append(row["bleu"])
                meta[key] = {k: row[k] for k in ("lo", "hi", "sentences")}
    rows = []
    for (system, label), values in per_seed.items():
        real = [v for v in values if v is not None]
        bleu, std = _mean_std(real) if real else (None, None)
        rows.append({"system": system, "bin": label, **meta[(system, label)],
                     "seeds": len(values), "bleu": bleu, "bleu_std": std})
    return rows
