"""Making the runs: each trained (unless it decodes another's checkpoint), decoded and scored,
``--jobs`` at a time."""
import concurrent.futures
import functools
import gzip
import shutil
import sys
import threading
import time

from ran_text import textio
from .. import portable
from ..common import paths
from ..common.jsonio import load_json, read_text_lines
from ..common.machine import machine_info
from .checkpoints import selected_checkpoint
from .errors import ReproError
from .logs import SPEED_RE
from .process import CHILDREN, run_logged
from .scores import detokenize, tokenized_bleu
from .store import difference, read_result, stored_result, stored_train_argv
from .training import train


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
        raise ReproError(f"{label} decodes the checkpoint of {run.system['checkpoint_of']!r}, "
                         f"and {run.checkpoint} is gone: train that system again (move its "
                         f"result folder aside and rerun with --resume), or point "
                         f"--checkpoints at the folder that holds it")
    if not run.checkpoint.is_file():
        raise ReproError(f"{label}: training left no {run.checkpoint} (select: "
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
            raise ReproError(f"{path} is missing: the data-bin needs the raw and tokenized text "
                             f"that scripts/prepare-*.sh write (data-bins made before tokenized "
                             f"references were kept need a rebuild: add --force)")


def score_subset(run, subset, env, label):
    """Decode ``subset`` with the selected checkpoint, postprocess, and score it."""
    check_text(run, subset)
    refs = read_text_lines(run.raw_ref[subset], ReproError)
    start = time.perf_counter()
    gen = run_logged(["-m", "ran_lab.run_fairseq", "generate", *run.generate_argv[subset]],
                     run.output[subset], env, f"fairseq-generate {label} on {subset}")
    seconds = time.perf_counter() - start
    speed = SPEED_RE.search(gen)
    if not speed:
        raise ReproError(f"no timing line in {run.output[subset]}")

    def number(text):
        return float(text.replace(",", ""))

    translated = int(number(speed.group(1)))
    if translated != len(refs):
        raise ReproError(f"{label}: fairseq-generate translated {translated} of the {len(refs)} "
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

    refs = read_text_lines(run.raw_ref[subset], ReproError)
    output = run.output[subset]
    post_record = None
    if run.postprocess[subset]:
        run_logged(["-m", *run.postprocess[subset]], run.dir / f"postprocess.{subset}.log", env,
                   f"postprocessing {label} on {subset}")
        output = run.post_output[subset]
        if not output.is_file():
            raise ReproError(f"the postprocess command of {label} wrote no {output}")
        post_record = postprocess_record(output)
    try:
        hyps_tok = read_generate_output(output, prefix="H")
        # fairseq writes a reference word outside the vocabulary as <<unk>> in its T- lines
        ref_unks = sum(line.split().count("<<unk>>")
                       for line in read_generate_output(run.output[subset], prefix="T"))
    except ValueError as e:
        raise ReproError(f"{label}: {e}") from e
    hyps = detokenize(hyps_tok, run.src, run.tgt)
    textio.write_text_atomic(run.hyp_file[subset], "".join(h + "\n" for h in hyps))
    tok_refs = read_text_lines(run.tok_ref[subset], ReproError)
    try:
        sacre = score(hyps, refs)
        tok = tokenized_bleu(hyps_tok, tok_refs) if len(tok_refs) == len(hyps_tok) else None
    except ValueError as e:
        raise ReproError(f"{label}: {e} ({run.raw_ref[subset]})") from e
    if tok is None:
        raise ReproError(f"{label}: {run.tok_ref[subset]} has {len(tok_refs)} lines for "
                         f"{len(hyps_tok)} hypotheses")
    if run.postprocess[subset]:
        keep_generate_output(run.output[subset], run.kept_output[subset])
    return {
        "tok_bleu": tok, "sacrebleu": sacre["bleu"][0], "chrf": sacre["chrf"][0],
        "ter": sacre["ter"][0], "signatures": {k: v[1] for k, v in sacre.items()},
        "ref_unk_words": ref_unks, "ref_words": sum(len(line.split()) for line in tok_refs),
        "hyp_unk_words": sum(line.split().count("<unk>") for line in hyps_tok),
        "hyp_file": run.hyp_file[subset].name, "raw_ref": str(run.raw_ref[subset]),
    }, post_record


def postprocess_record(output):
    """What a postprocess command recorded beside its output (``OUTPUT.json``: for
    ``ran_text.replace_unk``, the method, the dictionary and the counts), or None."""
    path = output.with_name(output.name + ".json")
    if not path.is_file():
        return None
    return load_json(path, "the postprocess command's record",
                     "delete it and decode the run again", ReproError)


def keep_generate_output(plain, kept):
    """``plain`` (fairseq-generate's output) gzip'd into ``kept`` (byte-stable: no name, no time
    in the header), written atomically; ``plain`` is then removed."""
    def gzipped(raw):
        with open(plain, "rb") as src, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            shutil.copyfileobj(src, gz)

    textio.atomic_write(kept, gzipped, binary=True)
    plain.unlink()


def made_otherwise(run):
    """Whether ``run``'s folders hold a result or checkpoints made by other commands."""
    old = read_result(run)
    if old is not None and difference(run, old) is not None:
        return True
    argv = stored_train_argv(run) if run.trains else None
    return argv is not None and argv != run.train_argv


def run_label(run):
    return f"{run.pair} {run.system['name']} seed {run.seed}"


def machine_here(config, args):
    """The machine record of this invocation's runs; an error where the config trains on a GPU
    and torch sees none."""
    if config["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ReproError(f"{args.config} trains on a GPU and torch sees none; use "
                             f"--dry-run to print the commands, or the CPU config")
    return dict(machine_info(config["device"], args.threads), jobs=args.jobs)


def submit_all(pool, runs, one):
    """``one(run, trainer)`` of every run in ``pool``, trainings first, so that a decode-only run
    never holds a worker waiting for one (``trainer``: the Future of the training whose checkpoint
    it decodes, or None); returns the Futures by ``id(run)``."""
    futures = {}
    trained_by = {}  # (pair, system, seed) -> Future of a training run
    for run in sorted(runs, key=lambda r: not r.trains):
        trainer = None
        if not run.trains:
            trainer = trained_by.get((run.pair, run.system["checkpoint_of"], run.seed))
        futures[id(run)] = pool.submit(one, run, trainer)
        if run.trains:
            trained_by[(run.pair, run.system["name"], run.seed)] = futures[id(run)]
    return futures


def execute_all(runs, args, config, env, paper, name):
    """Every run, ``args.jobs`` at a time, in ``runs``' order; return (results of the finished
    runs in that order, labels of the runs not started before ``--stop-after``). A run that decodes
    another's checkpoint waits for it. The first failure starts no further run; the runs under way
    finish, then it is raised."""
    start = time.monotonic()
    lock = threading.Lock()
    failures = []
    results = {}

    def say(text):
        with lock:
            print(f"{name}: {text}", file=sys.stderr, flush=True)

    here = functools.lru_cache(maxsize=None)(functools.partial(machine_here, config, args))
    # --- launcher: slurm (ran_lab.reproduce.launch): the runs are Slurm jobs ---
    cluster = None
    if args.launcher == "slurm":
        from .launch.slurm import Cluster
        cluster = Cluster(args, paper, say)
    from .redo import redo_postprocess, redoable  # (redo builds on this module)

    def one(run, trainer):
        trained = trainer.result() if trainer is not None else None
        if trainer is not None and trained is None:
            return None  # its checkpoint's training did not run
        try:
            old, rescored = stored_result(run, args.force) if args.resume else (None, False)
            if old is not None:
                say(f"{run_label(run)}: done before, skipped (--resume)"
                    + (f"; rescored: sacreBLEU {old['sacrebleu']:.2f}" if rescored else ""))
                return old
            if failures or CHILDREN.stopped_by is not None or (
                    args.stop_after is not None
                    and time.monotonic() - start > 60 * args.stop_after):
                return None
            stored = read_result(run) if getattr(args, "redo_postprocess", False) else None
            if stored is not None and redoable(run, stored):
                # no device needed: its machine stays the one that decoded it
                say(f"{run_label(run)}: postprocessed again from its kept decoding "
                    f"(--redo-postprocess) ...")
                old = redo_postprocess(run, env, stored)
            else:
                machine = here() if cluster is None else None
                if not args.resume or (args.force and made_otherwise(run)):
                    # made again from the start (check_stored refused other commands' files
                    # unless --force)
                    if run.trains:
                        shutil.rmtree(run.save_dir, ignore_errors=True)
                    shutil.rmtree(run.dir, ignore_errors=True)
                if cluster is not None:  # made, measured and recorded in its job
                    return cluster.make(run, trained, lambda: CHILDREN.stopped_by is not None)
                say(f"{run_label(run)} ...")
                old = dict(execute(run, env, trained), machine=machine)
                if paper.measure is not None:
                    old.update(paper.measure(run, old))
            # recorded with the checkout's files as {repo}/PATH
            old = portable.record(old, paths.REPO)
        except Exception as e:  # noqa: BLE001  (kept, raised after the runs under way)
            with lock:
                failures.append(e)
            return None
        textio.write_json(run.dir / "result.json", old)
        say(f"{run_label(run)}: tok BLEU {old['tok_bleu']:.2f}, sacreBLEU {old['sacrebleu']:.2f}, "
            f"TER {old['ter']:.2f}, {old['decode']['sentences_per_s']:.2f} sent/s, "
            f"{old['train_seconds'] / 60:.1f} min training")
        return old

    workers = args.jobs if cluster is None else max(1, len(runs))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = submit_all(pool, runs, one)
        for run in runs:
            results[id(run)] = futures[id(run)].result()
    if failures:
        raise failures[0]
    not_run = [run_label(run) for run in runs if results[id(run)] is None]
    if cluster is not None:  # each with its Slurm job, and why it has no result
        not_run = [cluster.reasons.get(id(run), run_label(run))
                   for run in runs if results[id(run)] is None]
        if not_run:
            print(f"{name}: without a result: {'; '.join(not_run)}", file=sys.stderr)
    elif not_run:
        print(f"{name}: not run before --stop-after {args.stop_after:g} min: "
              f"{'; '.join(not_run)} (rerun with --resume)", file=sys.stderr)
    return [results[id(run)] for run in runs if results[id(run)] is not None], not_run
