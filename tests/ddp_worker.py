"""fairseq-train under torchrun, for tests: ``torchrun ... tests/ddp_worker.py DUMP_DIR <fairseq-train
flags>`` trains as ``fairseq-train`` would and then writes this rank's model parameters and buffers
to ``DUMP_DIR/rank<RANK>.pt`` (fairseq itself saves rank 0's only), so a test can compare ranks."""
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

if __name__ == "__main__":
    dump_dir = sys.argv[1]
    sys.argv = ["fairseq-train", *sys.argv[2:]]
    from fairseq_cli.train import cli_main

    cli_main()
    (trainer,) = _trainers
    state = {k: v.detach().cpu().clone() for k, v in trainer.get_model().state_dict().items()}
    torch.save({"state": state, "updates": trainer.get_num_updates(),
                "world_size": torch.distributed.get_world_size()},
               os.path.join(dump_dir, f"rank{os.environ['RANK']}.pt"))
