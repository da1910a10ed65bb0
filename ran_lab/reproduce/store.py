"""Stored results: whether a run's result.json (and its checkpoint folder's training command) was
made by this run's commands, the finished runs beside this invocation's, the refusal to replace or
drop what other commands made (without --force), and rescoring with this checkout's scoring."""
import re
import sys
from pathlib import Path

from ran_text import textio
from ..common import schema
from ..common.flags import flag_pairs
from ..common.paths import shown, slug
from .config import parse_pairs
from . import inputs, replace
from ran_lab.common import LabError
from .runs import Run
from .scores import tokenized_bleu


def device_free(commands):
    """``commands`` without fairseq's ``--cpu``: the device is where a recipe ran, not part of it,
    so a GPU config's stored results and a CPU run of the same recipe (``--device``) go together."""
    if isinstance(commands, dict):
        return {key: device_free(value) for key, value in commands.items()}
    if isinstance(commands, list):
        return [device_free(c) for c in commands if c != "--cpu"]
    return commands


FIX_RESULT = ("delete it: --resume then decodes and scores the run again (its training is "
              "kept)")


def flags_difference(old, new, most=4):
    """'--max-update 1300 → 300, --seed 1 → 2': the flags whose values differ between two
    command lines (a flag without a value shows as 'set', an absent one as 'unset')."""
    a, b = flag_pairs(old or []), flag_pairs(new or [])

    def value(flags, key):
        return "unset" if key not in flags else ("set" if flags[key] is None else flags[key])

    keys = [k for k in dict.fromkeys(list(a) + list(b))
            if value(a, k) != value(b, k) and k.startswith("-")]
    parts = [f"{k} {value(a, k)} → {value(b, k)}" for k in keys[:most]]
    if len(keys) > most:
        parts.append(f"{len(keys) - most} more")
    return ", ".join(parts) or "the same flags in another order or with other data"


def difference(run, old):
    """None if the stored result ``old`` was made by ``run``'s commands (on any device, in any
    checkout: both name the checkout's files relative to it), else what differs, e.g.
    'training: --max-update 1300 → 300'."""
    mine, theirs = device_free(run.recorded()), device_free(old.get("commands"))
    if mine == theirs:
        return None
    if not isinstance(theirs, dict):
        return "commands not recorded"
    if theirs.get("train") != mine["train"]:
        return f"training: {flags_difference(theirs.get('train'), mine['train'])}"
    generate = theirs.get("generate") or {}
    for subset in dict.fromkeys(list(mine["generate"]) + list(generate)):
        if generate.get(subset) != mine["generate"].get(subset):
            return (f"decoding {subset}: "
                    f"{flags_difference(generate.get(subset), mine['generate'].get(subset))}")
    return "another postprocess command"


def stored_train_argv(run):
    """The training command recorded in ``run``'s checkpoint folder (None if none)."""
    path = run.save_dir / "train_argv.json"
    if not path.is_file():
        return None
    fix = (f"delete it if the checkpoints beside it were trained by this run's command "
           f"({shown(run.save_dir)}), else delete the folder")
    what = "the training command of the folder's checkpoints"
    return schema.check(textio.read_json(path, what, fix, shape=list), schema.FLAGS, path, what,
                        fix)


def read_result(run):
    """``run``'s stored result.json (None if there is none), checked."""
    path = run.dir / "result.json"
    if not path.is_file():
        return None
    result = textio.read_json(path, "a run's result", FIX_RESULT, shape=dict)
    schema.check(result, schema.RESULT, path, "a run's result", FIX_RESULT)
    check_place(run, result, path)
    return result


def check_place(run, result, path):
    """Refuse a result.json whose pair, system (its folder name) and seed are not those of the
    folder it lies in (PAIR/SYSTEM/seedN): edited, or copied into another run's folder, it would
    move its row in the table (and take another run's place)."""
    folder = run.dir
    try:
        says = (result["pair"], slug(result["system"]), f"seed{result['seed']}")
    except ValueError:
        says = (result["pair"], result["system"], f"seed{result['seed']}")
    place = (folder.parent.parent.name, folder.parent.name, folder.name)
    if says != place:
        raise LabError(f"{path} says it is the run {'/'.join(says)} but lies in "
                         f"{'/'.join(place)}: a result belongs to its folder; restore it, or "
                         f"{FIX_RESULT}")


def stored_result(run, old, force=False, again=False):
    """(``old``, ``run``'s stored result as read, rescored by :func:`rescore`, True if that changed
    it), or (None, False) where it has none (or, with ``force``, one made by other commands, which
    is made again); error if made by other commands (on any device)."""
    diff = None if old is None else difference(run, old)
    if diff is not None and not force:
        raise LabError(f"{run.dir / 'result.json'} was made with other settings ({diff}); it is "
                       f"kept: rerun with --force to replace it, or pick another --out"
                       f"{replace.aside_note([run])}")
    if old is None or diff is not None:
        return None, False
    return old, rescore(run, old, again)


FIX_REPORT = "delete it: the engine writes it again from the runs' result.json"


def stored_report(out):
    """The folder's results.json ({} if there is none); one that is not an object with a list of
    result objects under "results" is an error naming it."""
    path = Path(out) / "results.json"
    if not path.is_file():
        return {}
    report = textio.read_json(path, "the folder's table data", FIX_REPORT, shape=dict)
    return schema.check(report, schema.RESULTS, path, "the folder's table data",
                        FIX_REPORT)


def stored_rows(out):
    """The result objects of the folder's results.json ([] if there is none)."""
    return stored_report(out).get("results") or []


def other_runs(args, config, runs, data_template):
    """The config's runs in --out that this invocation did not select (every system of its
    systems file, its pairs and seeds, these, and those of the folder's last table) and that hold
    a result.json."""
    chosen = {(run.pair, run.system["name"], run.seed) for run in runs}
    tabulated = stored_rows(args.out)  # the folder's last table's runs
    pairs = list(dict.fromkeys(parse_pairs(",".join(config["pairs"]))
                               + [(run.src, run.tgt) for run in runs]
                               + [tuple(r["pair"].split("-")) for r in tabulated
                                  if re.fullmatch(r"[a-z]{2,3}-[a-z]{2,3}", str(r.get("pair")))]))
    seeds = list(dict.fromkeys(list(config["seeds"]) + [run.seed for run in runs]
                               + [r["seed"] for r in tabulated if isinstance(r.get("seed"), int)]))
    for src, tgt in pairs:
        data = Path(data_template.format(src=src, tgt=tgt)).resolve()
        for seed in seeds:
            for system in config["systems"].values():
                run = Run(args, config, (src, tgt), system, data, seed)
                if (run.pair, system["name"], seed) not in chosen \
                        and (run.dir / "result.json").is_file():
                    yield run


def pairs_beside(args, config, runs, data_template):
    """The pairs of the stored runs beside this invocation's (:func:`other_runs`) that it does not
    name: the table rescores those runs and pairs them in the bootstrap against their references,
    so the engine prepares their data too (a fresh checkout has none)."""
    named = {(run.src, run.tgt) for run in runs}
    return list(dict.fromkeys((run.src, run.tgt)
                              for run in other_runs(args, config, runs, data_template)
                              if (run.src, run.tgt) not in named))


def finished_beside(args, config, runs, data_template, name):
    """The stored results in --out of the config's other runs (:func:`other_runs`) made by the
    same commands: [(run, result)]. So the table holds every finished run of its folder, and two
    engines training different systems into one folder each leave a table of both. One made by
    other commands is left out (which needs --force: :func:`check_stored`), and the log says so."""
    found = []
    for run in other_runs(args, config, runs, data_template):
        old = read_result(run)
        diff = difference(run, old)
        if diff is not None:
            print(f"{name}: {shown(run.dir / 'result.json')} left out of the table: made with "
                  f"other settings ({diff})", file=sys.stderr)
            continue
        rescore(run, old, getattr(args, "rescore", False))
        found.append((run, old))
    return found


def check_stored(args, config, runs, data_template, name):
    """Refuse, unless ``--force``, to replace what --out and --checkpoints hold that was made by
    other commands: a selected run's result (replaced by a new one), a checkpoint folder trained
    with other flags (trained again), another run's result (left out of the table), and rows of
    the folder's results.json and TABLE.md that the new ones would not hold (made by another
    systems file, say). With ``--force``, say what is replaced."""
    found, finished = [], []
    for run in runs:
        replace.recover(run, name, waiting_for_job=args.launcher == "slurm" and args.resume
                        and (run.dir / "slurm.json").is_file())
        old = read_result(run)
        diff = None if old is None else difference(run, old)
        if old is not None and diff is None and not args.resume:
            finished.append(shown(run.dir / "result.json"))
        if diff is not None:
            found.append(f"{shown(run.dir / 'result.json')} was made with other settings "
                         f"({diff}) and would be replaced")
        elif old is not None and args.resume:
            continue  # skipped: its checkpoints are not touched
        argv = stored_train_argv(run) if run.trains else None
        if argv is not None and argv != run.train_argv:
            found.append(f"the checkpoints in {shown(run.save_dir)} were trained with other "
                         f"flags ({flags_difference(argv, run.train_argv)}) and would be "
                         f"trained again")
    if finished and not args.force:
        listed = ", ".join(finished[:4]) + (f" and {len(finished) - 4} more"
                                            if len(finished) > 4 else "")
        raise LabError(f"nothing was changed: {listed} hold(s) a finished run of these "
                         f"commands. Rerun with --resume to keep it (it is skipped), or with "
                         f"--force to make it again (its files stay until the new ones are "
                         f"whole){replace.aside_note(runs)}")
    if finished:
        print(f"{name}: --force: {', '.join(finished)} made again; the finished run's files "
              f"stay until the new ones are whole", file=sys.stderr, flush=True)
    found += table_losses(args, config, runs, data_template)
    if not found:
        return
    listed = "; ".join(found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8 else "")
    if not args.force:
        raise LabError(f"nothing was changed: {listed}. Rerun with --force to go on, or with "
                         f"another --out (and --checkpoints) to keep them"
                         f"{replace.aside_note(runs)}")
    print(f"{name}: --force: {listed}", file=sys.stderr, flush=True)


def table_losses(args, config, runs, data_template):
    """What a table of ``runs`` written now into --out would lose, read from the disk: another
    run's result made by other commands (left out of it), and rows of the folder's results.json
    that it would not hold (made by another systems file, or another engine that wrote its table
    since this one started). Each as a sentence naming the run."""
    found = []
    kept = {(run.pair, run.system["name"], run.seed) for run in runs}
    for run in other_runs(args, config, runs, data_template):
        diff = difference(run, read_result(run))
        if diff is not None:
            found.append(f"{shown(run.dir / 'result.json')} was made with other settings "
                         f"({diff}) and would be left out of the table")
        else:
            kept.add((run.pair, run.system["name"], run.seed))
    lost = [f"{r.get('pair')} {r.get('system')} seed {r.get('seed')}"
            for r in stored_rows(args.out)
            if (r.get("pair"), r.get("system"), r.get("seed")) not in kept]
    if lost:
        found.append(f"{shown(args.out / 'results.json')} and TABLE.md hold runs that this "
                     f"config does not make or find in the folder ({', '.join(lost[:4])}"
                     f"{f' and {len(lost) - 4} more' if len(lost) > 4 else ''}), which would be "
                     f"dropped from them")
    return found


def check_table(args, config, runs, data_template):
    """Refuse, unless ``--force``, to write a table that would lose a row (:func:`table_losses`),
    checked when it is written, under the table's lock: another engine on --out may have finished
    a run of other settings, or written its table, since this one started. Nothing is lost: the
    table stays as it was, and this invocation's results stay in their folders."""
    found = table_losses(args, config, runs, data_template)
    if found and not args.force:
        listed = "; ".join(found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8
                                         else "")
        mine = ", ".join(shown(run.dir / "result.json") for run in runs[:3])
        raise LabError(f"the table was not written (another run in {shown(args.out)} finished "
                         f"meanwhile): {listed}. This invocation's results are kept ({mine}"
                         f"{', ...' if len(runs) > 3 else ''}); tabulate them in another --out "
                         f"(copy their folders there and rerun with --resume), or rerun with "
                         f"--resume --force to leave the others out of this table")


def tokenized_output(run, subset):
    """The decoding whose H- lines ``subset``'s tokenized BLEU was computed from (None where the
    run folder does not keep it)."""
    path = run.post_output[subset] if run.postprocess[subset] else run.output[subset]
    return path if path.is_file() else None


def rescore(run, old, again=False):
    """Recompute a stored result's sacreBLEU, chrF and TER from its hypotheses with this checkout's
    scoring (so a fix to scoring reaches finished runs through ``--resume``), in place and in its
    result.json; True if a value changed. A subset whose hypotheses or references are not here keeps its scores. Each
    subset's inputs are checked against the SHA-256 it records (:mod:`.inputs`): a changed one
    is an error naming it, unless ``again`` (``--rescore``): the subset is then scored against the
    files here, its tokenized BLEU too, and their SHA-256 recorded. A subset that records none (a
    result made before they were recorded) gains them."""
    from ran_text.evaluate import read_generate_output, score

    changed = False
    for subset, scores in old.get("subsets", {}).items():
        hyps, refs = run.dir / scores.get("hyp_file", ""), run.raw_ref.get(subset)
        if not (scores.get("hyp_file") and hyps.is_file() and refs and refs.is_file()):
            continue
        lines, ref_lines = textio.read_lines(hyps), textio.read_lines(refs)
        if len(lines) != len(ref_lines):
            raise LabError(f"{hyps} (the run's hypotheses) has {len(lines)} lines for the "
                             f"{len(ref_lines)} references of {refs}: it was cut short or "
                             f"edited; delete the run's result.json: --resume then decodes and "
                             f"scores the run again (its training is kept)")
        recorded = scores.get("sha256")
        if isinstance(recorded, dict) and not again:
            inputs.refuse_changed(run, subset, recorded)
        new = score(lines, ref_lines)
        values = {"sacrebleu": new["bleu"][0], "chrf": new["chrf"][0], "ter": new["ter"][0]}
        if any(scores.get(k) is None or abs(scores[k] - v) > 1e-9 for k, v in values.items()):
            scores.update(values, signatures={k: v[1] for k, v in new.items()})
            changed = True
        now = inputs.hashes(run, subset)
        if again and isinstance(recorded, dict) and recorded.get("tok_refs") != now["tok_refs"]:
            output = tokenized_output(run, subset)
            if output is None:
                raise LabError(f"{run.tok_ref[subset]} changed since {run.pair} "
                                 f"{run.system['name']} seed {run.seed} was scored, and its "
                                 f"tokenized BLEU needs the run's decoding, which its folder no "
                                 f"longer keeps: delete {run.dir / 'result.json'} and rerun with "
                                 f"--resume (the run is decoded again)")
            scores["tok_bleu"] = tokenized_bleu(read_generate_output(output, prefix="H"),
                                                textio.read_lines(run.tok_ref[subset]))
        if recorded != now:
            scores["sha256"] = now
            changed = True
    main = old.get("subsets", {}).get(run.subsets[0])
    if changed and main is not None:
        old.update({k: main[k] for k in ("tok_bleu", "sacrebleu", "chrf", "ter", "signatures")
                    if k in main})
    if changed:
        textio.write_json(run.dir / "result.json", old)
    return changed
