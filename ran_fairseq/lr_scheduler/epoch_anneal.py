"""``--lr-scheduler epoch_anneal``: a constant learning rate for the first N epochs, then shrunk
by a factor at the start of every K-th epoch.

Yang et al. (2017), section 3.2, train Chinese-English with the rate 0.7 for 10 epochs and then
halve it every two epochs (18 in all): ``--anneal-after-epochs 10 --anneal-every 2 --lr-shrink
0.5``. fairseq's ``fixed`` scheduler (``--force-anneal``) can only shrink at every epoch, and its
``manual`` one logs a warning at every update when no ``--update2lr`` is given, hence this one.

Epoch e (numbered from 1) trains at ``lr`` when ``e <= N`` and otherwise at
``lr * shrink ** (1 + (e - N - 1) // K)``: with N = 10 and K = 2, epochs 11-12 get lr/2,
13-14 lr/4, 15-16 lr/8, 17-18 lr/16. With K = 1 this is ``fixed --force-anneal N+1``.
The rate depends on the epoch number only, so a resumed run gets the same schedule.
"""
from dataclasses import dataclass, field
from typing import List

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II


def annealed_lr(lr: float, epoch: int, after: int, every: int, shrink: float) -> float:
    """The learning rate of ``epoch`` (from 1) under the schedule above."""
    if epoch <= after:
        return lr
    return lr * shrink ** (1 + (epoch - after - 1) // every)


@dataclass
class EpochAnnealConfig(FairseqDataclass):
    anneal_after_epochs: int = field(
        default=0, metadata={"help": "epochs trained at the initial --lr before the first shrink"})
    anneal_every: int = field(
        default=1, metadata={"help": "shrink the rate at the start of every this many epochs"})
    lr_shrink: float = field(
        default=0.5, metadata={"help": "factor applied at each shrink (0 < shrink <= 1)"})
    lr: List[float] = II("optimization.lr")


@register_lr_scheduler("epoch_anneal", dataclass=EpochAnnealConfig)
class EpochAnnealSchedule(FairseqLRScheduler):
    def __init__(self, cfg: EpochAnnealConfig, optimizer):
        super().__init__(cfg, optimizer)
        if len(cfg.lr) != 1:
            raise ValueError(f"--lr-scheduler epoch_anneal takes one --lr, got {list(cfg.lr)}")
        if cfg.anneal_after_epochs < 0:
            raise ValueError(f"--anneal-after-epochs must be >= 0, got {cfg.anneal_after_epochs}")
        if cfg.anneal_every < 1:
            raise ValueError(f"--anneal-every must be >= 1 (epochs), got {cfg.anneal_every}")
        if not 0 < cfg.lr_shrink <= 1:
            raise ValueError(f"--lr-shrink must be in (0, 1], got {cfg.lr_shrink}")
        self.lr = cfg.lr[0]
        self.optimizer.set_lr(self.lr)

    def state_dict(self):
        return {"lr": self.lr}

    def load_state_dict(self, state_dict):
        self.lr = state_dict.get("lr", self.lr)

    def step_begin_epoch(self, epoch):
        self.lr = annealed_lr(self.cfg.lr[0], epoch, self.cfg.anneal_after_epochs,
                              self.cfg.anneal_every, self.cfg.lr_shrink)
        self.optimizer.set_lr(self.lr)
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        self.optimizer.set_lr(self.lr)
        return self.optimizer.get_lr()
