"""One run's work, wherever it runs (here, or in its Slurm job): trained (unless it decodes another
run's checkpoint), decoded, postprocessed and scored, measured, and recorded
(:func:`finished_result`). The scheduler is :mod:`.schedule`; where the work runs, :mod:`.launch`."""
import gzip
import shutil
import time

from ran_text import textio
from ..common.paths import shown
from . import inputs
from .checkpoints import selected_checkpoint
from ran_lab.common import LabError
from .logs import SPEED_RE
from .process import run_logged
from .scores import detokenize, tokenized_bleu
from .training import train


def finished_result(run, env, trained, paper_measure, machine):
    """``run``'s result as it is stored: :func:`execute`, the machine that made it, the paper's
    own measurements (``paper_measure``, or None)."""
    result = dict(execute(run, env, trained), machine=machine)
    if paper_measure is not None:
        result.update(paper_measure(run, result))
    return result


def execute(run, env, trained):
    """Train (unless ``trained`` holds the result of the system whose checkpoint it decodes),
    decode and score one (pair, system, seed) on every subset; return its result dict."""
    run.dir.mkdir(parents=True, exist_ok=True)
    label = f"({run.pair}, {run.system['name']}, seed {run.seed})"
    if run.trains:
        training = train(run, env, label)
    else:
        training = {k: trained.get(k) for k in ("params", "params_trained", "train_seconds",
                                                "train_step_seconds", "train_words_per_s",
                                                "valid_curve", "continued_from")}
        if training["continued_from"] is None:
            del training["continued_from"]
    if not run.checkpoint.is_file() and not run.trains:
        # the decoded system's result was kept (--resume) but its checkpoints were removed
        raise LabError(f"{label} decodes the checkpoint of {run.system['checkpoint_of']!r}, "
                         f"and {run.checkpoint} is gone: train that system again (move its "
                         f"result folder aside and rerun with --resume), or point "
                         f"--checkpoints at the folder that holds it")
    if not run.checkpoint.is_file():
        raise LabError(f"{label}: training left no {run.checkpoint} (select: "
                         f"{run.checkpoint.name}); see {run.dir / 'train.log'}")
    selected = selected_checkpoint(run.checkpoint)
    # fairseq stores the epoch its data iterator will start next; name the validation's instead
    selected["epoch"] = next((p["epoch"] for p in training.get("valid_curve") or []
                              if p.get("num_updates") == selected["num_updates"]
                              and "epoch" in p), selected["epoch"])
    scores = {subset: score_subset(run, subset, env, label) for subset in run.subsets}
    main_scores = scores[run.subsets[0]]
    return {
        "pair": run.pair, "system": run.system["name"], "seed": run.seed,
        "arch": run.system["arch"], "flags": run.system["flags"],
        "tables": run.system["tables"], "checkpoint_of": run.system["checkpoint_of"],
        **training, "selected": selected,
        **{k: main_scores[k] for k in ("tok_bleu", "sacrebleu", "chrf", "ter", "signatures",
                                       "decode", "generate_seconds")},
        "subsets": scores,
        "train_argv": run.train_argv, "generate_argv": run.generate_argv[run.subsets[0]],
        "postprocess": run.postprocess[run.subsets[0]], "commands": run.recorded(),
    }


def check_text(run, subset):
    for path in (run.raw_src[subset], run.raw_ref[subset], run.tok_ref[subset]):
        if not path.is_file():
            raise LabError(f"{path} is missing: the data-bin needs the raw and tokenized text "
                             f"that scripts/prepare-*.sh write (data-bins made before tokenized "
                             f"references were kept need a rebuild: add --force)")


def score_subset(run, subset, env, label):
    """Decode ``subset`` with the selected checkpoint, postprocess, and score it."""
    check_text(run, subset)
    refs = textio.read_lines(run.raw_ref[subset])
    start = time.perf_counter()
    gen = run_logged(["-m", "ran_lab.run_fairseq", "generate", *run.generate_argv[subset]],
                     run.output[subset], env, f"fairseq-generate {label} on {subset}")
    seconds = time.perf_counter() - start
    speed = SPEED_RE.search(gen)
    if not speed:
        raise LabError(f"no timing line in {run.output[subset]}")

    def number(text):
        return float(text.replace(",", ""))

    translated = int(number(speed.group(1)))
    if translated != len(refs):
        raise LabError(f"{label}: fairseq-generate translated {translated} of the {len(refs)} "
                         f"sentences of {subset} ({run.output[subset]}); a sentence longer than "
                         f"the model's max positions is skipped or refused: see its log")
    scores, post_record = score_output(run, subset, env, label)
    scores.update(decode={"sentences": translated, "tokens": int(number(speed.group(2))),
                          "seconds": number(speed.group(3)),
                          "sentences_per_s": number(speed.group(4)),
                          "tokens_per_s": number(speed.group(5))},
                  generate_seconds=seconds)
    if post_record is not None:
        scores["postprocess_record"] = post_record
    return scores


def score_output(run, subset, env, label):
    """Postprocess (where the system has a postprocess) and score the decoding in
    ``run.output[subset]``: (scores, the postprocess's record or None). A postprocessed run's
    decoding is then kept gzip'd (:func:`keep_generate_output`)."""
    from ran_text.evaluate import read_generate_output, score

    refs = textio.read_lines(run.raw_ref[subset])
    output = run.output[subset]
    post_record = None
    if run.postprocess[subset]:
        run_logged(["-m", *run.postprocess[subset]], run.dir / f"postprocess.{subset}.log", env,
                   f"postprocessing {label} on {subset}")
        output = run.post_output[subset]
        if not output.is_file():
            raise LabError(f"the postprocess command of {label} wrote no {output}")
        post_record = postprocess_record(output)
    try:
        hyps_tok = read_generate_output(output, prefix="H")
        # fairseq writes a reference word outside the vocabulary as <<unk>> in its T- lines
        ref_unks = sum(line.split().count("<<unk>>")
                       for line in read_generate_output(run.output[subset], prefix="T"))
    except ValueError as e:
        raise LabError(f"{label}: {e}") from e
    hyps = detokenize(hyps_tok, run.src, run.tgt)
    textio.write_text_atomic(run.hyp_file[subset], "".join(h + "\n" for h in hyps))
    tok_refs = textio.read_lines(run.tok_ref[subset])
    try:
        sacre = score(hyps, refs)
        tok = tokenized_bleu(hyps_tok, tok_refs) if len(tok_refs) == len(hyps_tok) else None
    except ValueError as e:
        raise LabError(f"{label}: {e} ({run.raw_ref[subset]})") from e
    if tok is None:
        raise LabError(f"{label}: {run.tok_ref[subset]} has {len(tok_refs)} lines for "
                         f"{len(hyps_tok)} hypotheses")
    digests = inputs.hashes(run, subset)  # (before the decoding is gzip'd)
    if run.postprocess[subset]:
        keep_generate_output(run.output[subset], run.kept_output[subset])
    return {
        "tok_bleu": tok, "sacrebleu": sacre["bleu"][0], "chrf": sacre["chrf"][0],
        "ter": sacre["ter"][0], "signatures": {k: v[1] for k, v in sacre.items()},
        "ref_unk_words": ref_unks, "ref_words": sum(len(line.split()) for line in tok_refs),
        "hyp_unk_words": sum(line.split().count("<unk>") for line in hyps_tok),
        "hyp_file": run.hyp_file[subset].name, "raw_ref": shown(run.raw_ref[subset]),
        "sha256": digests,
    }, post_record


def postprocess_record(output):
    """What a postprocess command recorded beside its output (``OUTPUT.json``: for
    ``ran_text.replace_unk``, the method, the dictionary and the counts), or None."""
    path = output.with_name(output.name + ".json")
    if not path.is_file():
        return None
    return textio.read_json(path, "the postprocess command's record",
                            "delete it and decode the run again")


def keep_generate_output(plain, kept):
    """``plain`` (fairseq-generate's output) gzip'd into ``kept`` (byte-stable: no name, no time
    in the header), written atomically; ``plain`` is then removed."""
    def gzipped(raw):
        with open(plain, "rb") as src, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            shutil.copyfileobj(src, gz)

    textio.atomic_write(kept, gzipped, binary=True)
    plain.unlink()


