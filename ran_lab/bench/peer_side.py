"""What every side of the peer benchmark shares (:mod:`ran_lab.bench.peer_worker` runs them): the
token ids, the case's batch, the loss, and :class:`Side`, a model with its training step and
greedy decoding."""
import torch
import torch.nn.functional as F

PAD, BOS, EOS = 1, 2, 3  # token ids; ids from 4 are words
FIRST_WORD = 4


def make_batch(case):
    """The case's batch, the same for every side (seeded): source (B, S) and target (B, T) token
    ids, with the decoder's input (BOS, then the target shifted right); with ``padded``, each
    sentence's lengths drawn between half and all of the grid and the rest padding (right)."""
    g = torch.Generator().manual_seed(case.get("seed", 1))
    b, s, t, vocab = case["sentences"], case["source_length"], case["target_length"], case["vocab"]
    src = torch.randint(FIRST_WORD, vocab, (b, s), generator=g)
    tgt = torch.randint(FIRST_WORD, vocab, (b, t), generator=g)
    src_lengths = torch.full((b,), s)
    tgt_lengths = torch.full((b,), t)
    if case.get("padded"):
        src_lengths = torch.randint((s + 1) // 2, s + 1, (b,), generator=g)
        tgt_lengths = torch.randint((t + 1) // 2, t + 1, (b,), generator=g)
        src_lengths[0], tgt_lengths[0] = s, t  # the grid is as large as its longest sentences
        for i in range(b):
            src[i, src_lengths[i]:] = PAD
            tgt[i, tgt_lengths[i]:] = PAD
    prev = torch.cat([torch.full((b, 1), BOS), tgt[:, :-1]], dim=1).masked_fill(tgt.eq(PAD), PAD)
    return {"src": src, "src_lengths": src_lengths, "tgt": tgt, "tgt_lengths": tgt_lengths,
            "prev": prev}


def nll(log_probs, target):
    """The summed negative log-likelihood of the target's real tokens."""
    return F.nll_loss(log_probs.reshape(-1, log_probs.size(-1)), target.reshape(-1),
                      ignore_index=PAD, reduction="sum")


class Side:
    """A model of one side with its batch: :meth:`train_step` (one forward, backward and Adam
    step) and :meth:`decode` (greedy decoding of the batch's sources to the case's target
    length, no stop at EOS, so that every side does the same work); subclasses give
    :meth:`log_probs` and :meth:`greedy`."""

    def __init__(self, model, case, info=None):
        self.model, self.case, self.batch = model, case, make_batch(case)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        self.info = dict(info or {})
        self.info["parameters"] = sum(p.numel() for p in model.parameters())

    def log_probs(self, batch):
        raise NotImplementedError

    def greedy(self, batch, length):
        raise NotImplementedError

    def train_step(self):
        self.model.train()
        loss = nll(self.log_probs(self.batch), self.batch["tgt"])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def saved_bytes(self):
        """Bytes of the tensors autograd keeps from one training forward pass for its backward
        (distinct storages, parameters left out): the activation memory of a step, exactly and
        independently of the allocator."""
        from torch.autograd.graph import saved_tensors_hooks

        parameters = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        saved = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in parameters:
                saved[storage.data_ptr()] = storage.nbytes()
            return t

        self.model.train()
        with saved_tensors_hooks(pack, lambda t: t):
            loss = nll(self.log_probs(self.batch), self.batch["tgt"])
        loss.backward()
        self.optimizer.zero_grad(set_to_none=True)
        return sum(saved.values())

    def kernels(self):
        """aten operators a training forward and backward pass dispatches (views left out;
        ran_lab/bench/kernels.py): about the kernel launches of a step on a GPU."""
        from .kernels import KernelCounter

        self.model.train()
        with KernelCounter() as counter:
            nll(self.log_probs(self.batch), self.batch["tgt"]).backward()
        self.optimizer.zero_grad(set_to_none=True)
        return counter.total

    @torch.no_grad()
    def decode(self):
        self.model.eval()
        tokens = self.greedy(self.batch, self.case["target_length"])
        return int(tokens.numel())
