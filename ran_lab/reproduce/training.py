"""Training one run: carried on from a continued config's checkpoints, resumed, or found finished;
and what its log says of it."""
import sys
import time

from ran_text import textio
from ..common.flags import flag_pairs
from ..common import schema
from ..common.paths import shown
from .checkpoints import copy_atomic, load_checkpoint, remove_partial_files
from ran_lab.common import LabError
from .logs import PARAMS_RE, WALL_RE, training_seconds, training_speed, validation_curve
from .process import run_logged
from .store import stored_train_argv


STOP_FLAGS = ("--max-update",)


FIX_FINISHED = ("delete it: --resume then compares checkpoint_last.pt's update count with the "
                "budget, and trains only if it falls short")


def read_finished(path, what="the record of a finished training"):
    """A checkpoint folder's train_finished.json: {"argv": [...], "seconds": N}, checked."""
    return schema.check(textio.read_json(path, what, FIX_FINISHED), schema.TRAIN_FINISHED,
                        path, what, FIX_FINISHED)


def start_from_continued(run, label):
    """Start ``run``'s training where the continued config's training of the same (pair, system,
    seed) stopped: copy its checkpoints and its training log. fairseq-train then resumes from
    checkpoint_last.pt, restoring the model, the optimizer, the learning-rate schedule and the
    place in the epoch's batches, and seeds dropout by update number. One thing differs from a
    single run to the larger --max-update: fairseq groups sentences into batches once per process
    (ties among equal lengths broken by a draw from the seed and the starting epoch), so the
    batches after the resume group sentences differently. Only a finished training with the same
    flags except --save-dir and a smaller --max-update is taken; otherwise the run trains from the
    start, and says why."""
    cont = run.continues
    finished = cont["save_dir"] / "train_finished.json"
    old_log = cont["dir"] / "train.log"

    def comparable(argv):
        return {k: v for k, v in flag_pairs(argv).items() if k not in STOP_FLAGS + ("--save-dir",)}

    why = None
    if not finished.is_file() or not (cont["save_dir"] / "checkpoint_last.pt").is_file():
        why = f"{cont['save_dir']} holds no finished training"
    elif not old_log.is_file():
        why = f"{old_log} is missing"
    else:
        old = read_finished(finished, "the continued training's record")["argv"]
        if comparable(old) != comparable(run.train_argv):
            diff = sorted(set(comparable(old).items()) ^ set(comparable(run.train_argv).items()),
                          key=str)
            why = (f"its training used other flags "
                   f"({', '.join(f'{k} {v}' if v else k for k, v in diff[:6])})")
        else:
            before, after = (int(flag_pairs(argv).get("--max-update") or 0)
                             for argv in (old, run.train_argv))
            if not 0 < before < after:
                why = f"its --max-update {before or 'unset'} is not below this run's {after}"
    if why:
        print(f"reproduce: {label}: trains from the start, not from {cont['config']}'s run: {why}",
              file=sys.stderr, flush=True)
        return
    copy_atomic(old_log, run.dir / "train.log")
    textio.write_json(run.dir / "continued_from.json", {
        "config": cont["config"], "checkpoints": shown(cont["save_dir"]),
        "train_log": shown(old_log), "max_update": before})
    # checkpoint_last.pt last: once it is there, --resume goes on from this run's own files
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        if (cont["save_dir"] / name).is_file():
            copy_atomic(cont["save_dir"] / name, run.save_dir / name)
    print(f"reproduce: {label}: continues {cont['config']}'s training from update {before}",
          file=sys.stderr, flush=True)


def finished_at_budget(run, label):
    """The training seconds of ``run``'s training if its checkpoint_last.pt is already at the
    budget (``--max-update``) though no record says the training finished (its engine was killed
    as fairseq-train ended, say): fairseq-train would take one more update. None where the
    training must run (no checkpoint, no budget, fewer updates). A checkpoint past the budget is
    an error."""
    last = run.save_dir / "checkpoint_last.pt"
    budget = int(flag_pairs(run.train_argv).get("--max-update") or 0)
    if budget <= 0 or not last.is_file():
        return None
    state = load_checkpoint(last)
    updates = ((state.get("optimizer_history") or [{}])[-1]).get("num_updates")
    if updates is None or updates < budget:
        return None
    if updates > budget:
        raise LabError(f"{label}: {last} is at update {updates}, past this run's --max-update "
                         f"{budget} (a training went on beyond it); rerun without --resume to "
                         f"train it again from the start")
    print(f"reproduce: {label}: {shown(last)} is at update {updates} of {budget}: its training "
          f"had finished; not trained again", file=sys.stderr, flush=True)
    return float((state.get("extra_state") or {}).get("previous_training_time") or 0.0)


def train(run, env, label):
    """Train ``run`` (unless its checkpoint folder holds its finished training) and return what its
    log and checkpoint say of the training: parameters, time, speed, validation curve, and where
    it was continued from."""
    run.save_dir.mkdir(parents=True, exist_ok=True)
    remove_partial_files(run.save_dir)
    if stored_train_argv(run) not in (None, run.train_argv):
        raise LabError(f"{run.save_dir} holds checkpoints trained with other flags; they "
                         f"are kept: rerun with --force to train there again, or pass "
                         f"--checkpoints DIR")
    textio.write_json(run.save_dir / "train_argv.json", run.train_argv, indent=None)
    if run.continues and not (run.save_dir / "checkpoint_last.pt").is_file():
        start_from_continued(run, label)
    # A finished training is not restarted: fairseq-train, given a checkpoint at its
    # --max-update, would still take one more step before it stops.
    finished = run.save_dir / "train_finished.json"
    record = read_finished(finished) if finished.is_file() else {}
    if record.get("argv") == run.train_argv:
        seconds = record["seconds"]
    else:
        seconds = finished_at_budget(run, label)
        if seconds is None:
            start = time.perf_counter()
            run_logged(["-m", "ran_lab.run_fairseq", "train", *run.train_argv],
                       run.dir / "train.log",
                       env, f"fairseq-train {label}", append=True, pass_fds=run.lock_fds)
            seconds = time.perf_counter() - start
        textio.write_json(finished, {"argv": run.train_argv, "seconds": seconds}, indent=None)
    log = (run.dir / "train.log").read_text(encoding="utf-8", errors="replace")
    params = PARAMS_RE.search(log)
    if not params:
        raise LabError(f"no parameter count in {run.dir / 'train.log'}")
    walls = WALL_RE.findall(log)
    training = {"params": int(params.group(1).replace(",", "")),
                "params_trained": int(params.group(2).replace(",", "")),
                "train_seconds": training_seconds(run.save_dir, walls, seconds),
                "train_step_seconds": float(walls[-1][0]) if walls else None,
                "train_words_per_s": training_speed(log),
                "valid_curve": validation_curve(log)}
    started = run.dir / "continued_from.json"
    if started.is_file():
        training["continued_from"] = textio.read_json(
            started, "where the training was continued from",
            f"delete {run.dir} and rerun with --resume (the training's checkpoints are kept)")
    return training
