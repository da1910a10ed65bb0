"""What fairseq's logs say: parameter counts, training speed, wall time, the validation curve and
its trend, and decoding speed."""
import re
from pathlib import Path

from .checkpoints import load_checkpoint


PARAMS_RE = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")


WPS_RE = re.compile(r"\| train \| epoch \d+ \|.*?\| wps ([\d.]+) \|")


SPEED_RE = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
                      r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")


def training_speed(log):
    """Mean target words/s of fairseq-train's end-of-epoch summaries (None if it logged none)."""
    rates = [float(x) for x in WPS_RE.findall(log)]
    return sum(rates) / len(rates) if rates else None


# fairseq-train's end-of-epoch line: time in training steps, and wall time since the start
# "| train_wall 39 | wall 4575" on a CPU; a GPU logs "| gb_free 78.3 " between the two
WALL_RE = re.compile(r"\| train \| epoch \d+ \|.*?\| train_wall ([\d.]+) (?:\|.*?)?\| wall ([\d.]+)")


VALID_RE = re.compile(r"\| valid \| (.*)$", re.M)


def validation_curve(log):
    """fairseq-train's end-of-validation lines as dicts (epoch, num_updates, loss, and bleu where
    it computed it), in log order."""
    curve = []
    for fields in VALID_RE.findall(log):
        entry = {}
        for part in fields.split(" | "):  # "epoch 003 | valid on 'valid' subset | loss 6.05 | ..."
            key, _, value = part.strip().partition(" ")
            if key in ("epoch", "num_updates"):
                entry[key] = int(value)
            elif key in ("loss", "nll_loss", "ppl", "bleu", "best_loss", "best_bleu"):
                entry[key] = float(value)
        curve.append(entry)
    return curve


def loss_trend(curve, epochs=3):
    """How fast the validation loss still moved at the end of training: its change per epoch
    over the last ``epochs`` epoch ends of ``curve`` (validation_curve's entries), in percent of
    the last loss (losses summed per sentence and averaged per token compare alike), or None with
    fewer. A last validation after a short partial epoch (fairseq validates again when
    --max-update ends training mid-epoch) is left out: it adds a few updates, not an epoch."""
    points = [(c["num_updates"], c["loss"]) for c in curve or []
              if c.get("num_updates") is not None and c.get("loss") is not None]
    if len(points) < 2:
        return None
    steps = sorted(b[0] - a[0] for a, b in zip(points, points[1:]))
    epoch = steps[len(steps) // 2]  # updates per epoch
    if epoch <= 0:
        return None
    if points[-1][0] - points[-2][0] < epoch / 2:
        points = points[:-1]
    if len(points) < epochs:
        return None
    (u0, l0), (u1, l1) = points[-epochs], points[-1]
    return 100 * (l1 - l0) / ((u1 - u0) / epoch) / l1 if u1 > u0 and l1 else None


def training_seconds(save_dir, walls, seconds):
    """Wall-clock seconds of a whole training: fairseq's own count, which checkpoint_last.pt keeps
    across resumes (``previous_training_time``; the ``wall`` of the epoch lines starts again, or
    stays 0, in a resumed fairseq-train); else the last epoch line's ``wall``; else ``seconds``
    (the engine's timing of its last fairseq-train)."""
    path = Path(save_dir) / "checkpoint_last.pt"
    if path.is_file():
        state = load_checkpoint(path)
        total = (state.get("extra_state") or {}).get("previous_training_time")
        if total:
            return float(total)
    return float(walls[-1][1]) if walls else seconds
