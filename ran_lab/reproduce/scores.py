"""Scores of the hypotheses: detokenization, tokenized BLEU, and sacreBLEU's paired bootstrap
against the baseline."""
import sys
from pathlib import Path

from ran_text import textio
from ..common.paths import repo_path, slug


def detokenize(hyps, src, tgt):
    """Moses-tokenized hypotheses back to plain text, as ``fairseq-generate --tokenizer moses``
    would print them."""
    from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig

    moses = MosesTokenizer(MosesTokenizerConfig(source_lang=src, target_lang=tgt))
    return [moses.decode(h) for h in hyps]


def tokenized_bleu(hyps, refs):
    """BLEU of tokenized hypotheses against tokenized references, both split on spaces: the
    statistics of fairseq's ``--scoring bleu``, but against the reference text itself, so that a
    word the model could not produce (``<unk>`` in fairseq's T- lines) counts when a postprocess
    restores it."""
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyps, [refs]).score


BOOTSTRAP_METRICS = ("BLEU", "TER")


def paired_bootstrap(baseline_hyps, system_hyps, refs, samples, metric="BLEU"):
    """sacreBLEU's paired bootstrap resampling of ``system_hyps`` against ``baseline_hyps`` on
    ``metric`` (one of :data:`BOOTSTRAP_METRICS`, each with sacrebleu's default settings, as
    ``ran_text.evaluate`` scores them): ``(p_value, (mean, 95% half-width) of the
    system, of the baseline)``."""
    from sacrebleu.metrics import BLEU, TER
    from sacrebleu.significance import PairedTest

    from ran_text.evaluate import unk_as_one_word

    if metric not in BOOTSTRAP_METRICS:
        raise ValueError(f"no paired bootstrap for {metric!r}: the metric must be one of "
                         f"{', '.join(BOOTSTRAP_METRICS)}")
    baseline_hyps, system_hyps = unk_as_one_word(baseline_hyps), unk_as_one_word(system_hyps)
    scorer = (BLEU if metric == "BLEU" else TER)(references=[refs])
    test = PairedTest([("baseline", baseline_hyps), ("system", system_hyps)],
                      {metric: scorer}, references=None, test_type="bs", n_samples=samples)
    _, scores = test()
    base, system = scores[metric]
    return system.p_value, (system.mean, system.ci), (base.mean, base.ci)


def settled_p(baseline_hyps, system_hyps, refs, samples, metric="BLEU", level=0.01):
    """The paired bootstrap's p drawn until it is settled on one side of ``level``
    (:func:`ran_lab.claims.bootstrap.paired`: sacreBLEU's draw of ``samples`` first, so a p
    settled there is :func:`paired_bootstrap`'s): ``(p, settled)``."""
    from ..claims import bootstrap
    base = bootstrap.sentence_stats(baseline_hyps, refs, metric)
    system = bootstrap.sentence_stats(system_hyps, refs, metric)
    result = bootstrap.paired(base, system, bootstrap.Scorer(metric, refs), level, samples,
                              interval_samples=0)
    return result.p, result.settled


def add_significance(results, baseline, significance, out, refs=None):
    """Paired bootstrap of every result against the baseline's on the same pair, subset and seed,
    per subset, in place: ``p_value`` and ``better`` (sacreBLEU above the baseline's), and
    ``ter_p_value`` and ``ter_better`` (TER below the baseline's). ``refs``: (pair, subset) ->
    the raw references here (a result's own path may be another machine's)."""
    by_key = {(r["pair"], r["system"], r["seed"]): r for r in results}
    unscored = set()  # (pair, subset) without references here: said once
    for r in results:
        base = by_key.get((r["pair"], baseline, r["seed"]))
        for subset, scores in r["subsets"].items():
            for key in ("p_value", "better", "ter_p_value", "ter_better"):
                scores[key] = None
            scores.pop("p_unsettled", None)
            scores.pop("ter_p_unsettled", None)
            if base is None or r is base:
                continue
            run_dir = Path(out) / r["pair"]
            hyps = run_dir / slug(r["system"]) / f"seed{r['seed']}" / scores["hyp_file"]
            base_hyps = (run_dir / slug(baseline) / f"seed{r['seed']}" /
                         base["subsets"][subset]["hyp_file"])
            ref_file = Path((refs or {}).get((r["pair"], subset))
                            or repo_path(scores["raw_ref"]))
            if not (hyps.is_file() and base_hyps.is_file() and ref_file.is_file()):
                if hyps.is_file() and base_hyps.is_file() and (r["pair"], subset) not in unscored:
                    unscored.add((r["pair"], subset))
                    print(f"significance: {r['pair']} {subset}: no references at {ref_file}; "
                          f"its p-values are left empty", file=sys.stderr)
                continue
            texts = [textio.read_lines(f) for f in (base_hyps, hyps, ref_file)]
            level = significance.get("level", 0.01)
            scores["p_value"], settled = settled_p(*texts, significance["samples"], "BLEU", level)
            if not settled:
                scores["p_unsettled"] = True
            delta = scores["sacrebleu"] - base["subsets"][subset]["sacrebleu"]
            scores["better"] = None if delta == 0 else delta > 0
            scores["ter_p_value"], settled = settled_p(*texts, significance["samples"], "TER",
                                                       level)
            if not settled:
                scores["ter_p_unsettled"] = True
            delta = scores["ter"] - base["subsets"][subset]["ter"]
            scores["ter_better"] = None if delta == 0 else delta < 0  # TER: lower is better
