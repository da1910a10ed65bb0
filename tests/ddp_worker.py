"""fairseq-train under torchrun, for tests: ``torchrun ... tests/ddp_worker.py DUMP_DIR <fairseq-train
flags>`` trains as ``fairseq-train`` would and then writes this rank's model parameters and buffers
to ``DUMP_DIR/rank<RANK>.pt`` (fairseq itself saves rank 0's only), so a test can compare ranks.

``torchrun ... tests/ddp_worker.py --runs RUNS.json`` trains the runs of a JSON list of
``[DUMP_DIR, [flags...]]`` one after the other in the same processes (which import fairseq once),
each as a fairseq-train of its own: fairseq seeds each run and keeps the process group."""
import json
import os
import sys

import torch
from fairseq.trainer import Trainer

_trainers = []
_init = Trainer.__init__


def _remember(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    _trainers.append(self)


Trainer.__init__ = _remember


def train_and_dump(dump_dir, flags):
    from fairseq_cli.train import cli_main

    _trainers.clear()
    sys.argv = ["fairseq-train", *flags]
    cli_main()
    (trainer,) = _trainers
    state = {k: v.detach().cpu().clone() for k, v in trainer.get_model().state_dict().items()}
    torch.save({"state": state, "updates": trainer.get_num_updates(),
                "world_size": torch.distributed.get_world_size()},
               os.path.join(dump_dir, f"rank{os.environ['RANK']}.pt"))


if __name__ == "__main__":
    if sys.argv[1] == "--runs":
        with open(sys.argv[2]) as f:
            runs = json.load(f)
    else:
        runs = [(sys.argv[1], sys.argv[2:])]
    for dump_dir, flags in runs:
        train_and_dump(dump_dir, flags)
