"""Checkpoint averaging: one model whose parameters are the mean of several checkpoints' parameters.

Averaging the last checkpoints of a run (Vaswani et al. 2017, Section 6.1, averaged the last 5 or
20) smooths the noise of the final updates; the quickstart (``make demo``) uses it because a few
hundred updates at a high learning rate end far from a minimum. Command line:

    python -m ran_fairseq.checkpoint_average --output avg.pt a.pt b.pt c.pt
    python -m ran_fairseq.checkpoint_average --output avg.pt --last 3 checkpoints/run

``--last N DIR`` takes the N checkpoints of DIR with the most updates among its interval checkpoints
``checkpoint_<epoch>_<updates>.pt`` (``fairseq-train --save-interval-updates``) and
``checkpoint_last.pt``. The output is the newest
input checkpoint with its ``model`` replaced by the mean and its optimizer state dropped: it loads
in ``fairseq-generate``/``fairseq-interactive`` and ``from_pretrained``, not as a training resume.
"""
import argparse
import os
import re
import sys

import torch

from . import safe_checkpoints
from ran_text.textio import atomic_write, one_line_errors, os_error_line

_INTERVAL = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")


def _load(path):
    """A checkpoint through torch's weights-only unpickler (the classes ran_fairseq.safe_checkpoints allows),
    asked for explicitly: whatever torch's default, a checkpoint never runs code."""
    return safe_checkpoints.load_plain_checkpoint(path)


def interval_checkpoints(directory):
    """The ``checkpoint_<epoch>_<updates>.pt`` files of ``directory``, oldest (fewest updates)
    first."""
    found = []
    for name in os.listdir(directory):
        match = _INTERVAL.match(name)
        if match:
            found.append((int(match.group(2)), os.path.join(directory, name)))
    return [path for _, path in sorted(found)]


def _updates(path):
    """The update count stored in a fairseq checkpoint (None if it stores none)."""
    history = _load(path).get("optimizer_history") or [{}]
    return history[-1].get("num_updates")


def last_checkpoints(directory, n):
    """The ``n`` newest checkpoints of ``directory``, oldest first: its interval checkpoints and,
    when it holds more updates than the newest of them, ``checkpoint_last.pt`` (fairseq saves no
    interval checkpoint when training stops at the end of an epoch). A ValueError if there are
    fewer than ``n``."""
    if n < 1:
        raise ValueError(f"--last must be at least 1, got {n}")
    paths = interval_checkpoints(directory)
    last = os.path.join(directory, "checkpoint_last.pt")
    if os.path.exists(last):
        newest = int(_INTERVAL.match(os.path.basename(paths[-1])).group(2)) if paths else -1
        updates = _updates(last)
        if updates is not None and updates > newest:
            paths.append(last)
    if len(paths) < n:
        raise ValueError(f"--last {n}: {directory} has {len(paths)} checkpoints to average "
                         "(checkpoint_<epoch>_<updates>.pt, written with --save-interval-updates, "
                         "and a newer checkpoint_last.pt)")
    return paths[-n:]


def average_checkpoints(paths):
    """A checkpoint dict: the last of ``paths`` with ``model`` set to the element-wise mean of all
    their ``model`` tensors (accumulated in float64, stored in each tensor's dtype) and no
    optimizer state. Raises ValueError when the checkpoints hold different parameters."""
    if not paths:
        raise ValueError("no checkpoint to average")
    sums, names, state = None, None, None
    for path in paths:
        state = _load(path)
        model = state["model"]
        if sums is None:
            names = list(model)
            sums = {k: v.to(torch.float64) if v.is_floating_point() else v.clone()
                    for k, v in model.items()}
            dtypes = {k: v.dtype for k, v in model.items()}
            continue
        if list(model) != names:
            differ = sorted(set(model) ^ set(names))[:3]
            raise ValueError(f"{path} has other parameters than {paths[0]} (e.g. {differ}); "
                             "only checkpoints of one model can be averaged")
        for k, v in model.items():
            if v.shape != sums[k].shape:
                raise ValueError(f"{path}: {k} has shape {tuple(v.shape)}, "
                                 f"{paths[0]} has {tuple(sums[k].shape)}")
            if v.is_floating_point():
                sums[k] += v.to(torch.float64)
    state["model"] = {k: (v / len(paths)).to(dtypes[k]) if v.is_floating_point() else v
                      for k, v in sums.items()}
    state["last_optimizer_state"] = None  # fairseq's loader still reads optimizer_history
    return state


@one_line_errors("checkpoint_average")
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ran_fairseq.checkpoint_average",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="*", help="checkpoint files to average")
    p.add_argument("--last", nargs=2, metavar=("N", "DIR"),
                   help="average the N checkpoints of DIR with the most updates (interval "
                        "checkpoints and checkpoint_last.pt)")
    p.add_argument("--output", required=True, help="where to write the averaged checkpoint")
    args = p.parse_args(argv)
    if bool(args.checkpoints) == bool(args.last):
        p.error("give either checkpoint files or --last N DIR")
    try:
        if args.last:
            if not args.last[0].isdigit():
                raise ValueError(f"--last N DIR: N must be a number, got {args.last[0]!r}")
            paths = last_checkpoints(args.last[1], int(args.last[0]))
        else:
            paths = args.checkpoints
        state = average_checkpoints(paths)
    except (ValueError, OSError, safe_checkpoints.BadCheckpoint) as e:
        print(f"checkpoint_average: error: "
              f"{os_error_line(e) if isinstance(e, OSError) else e}", file=sys.stderr)
        return 2
    atomic_write(args.output, lambda f: torch.save(state, f), binary=True)
    print(f"averaged {len(paths)} checkpoints ({', '.join(os.path.basename(x) for x in paths)}) "
          f"into {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
