"""Zeng et al. 2021's released code (``thseq``, https://github.com/lemon0830/RAN, ``code_RAN/thseq``)
as a side of the peer benchmark (:mod:`ran_lab.bench.peers`).

The model is thseq's ``transformer`` with recurrent random attention on both sides (RAN-ALL):
``--enc-att-type recrand --dec-att-type recrand`` (the README spells them ``--att-enc-type`` and
``--att-dec-type``, which the code's parser does not know), dot-product cross-attention (the
default ``--cross-att-type std``), the authors' transition (``--rec-func 0``, the default: A_l =
A_{l-1} + W_2 ReLU(W_1 A_{l-1} + b_1) + b_2, n -> 1,024 -> n, one per side), n = 256 positions
(fixed in its code), post-norm layers, and the options of the README's training command:
``--share-all-embedding 1 --attention-dropout 0 --ffn-dropout 0`` and the residual dropout of the
case (the README's 0.1). The sizes are the case's.

The code is imported from the clone at run time (``code_RAN`` and its ``Lunas`` on ``sys.path``),
never copied. ``thseq.data`` imports numba for its batching by size, which the benchmark does not
use; where numba is not installed, a stand-in lets that import through (its functions raise if
called) and is taken out of ``sys.modules`` again.
"""
import argparse
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from .peer_side import BOS, PAD, Side


def thseq_flags(case):
    """thseq's model options for a case, in its own spelling (see the module docstring)."""
    d = str(case["embed_dim"])
    return ["--input-size", d, "--hidden-size", d, "--ffn-hidden-size", str(case["ffn_dim"]),
            "--num-heads", str(case["heads"]), "--num-encoder-layers", str(case["layers"]),
            "--num-decoder-layers", str(case["layers"]), "--enc-att-type", "recrand",
            "--dec-att-type", "recrand", "--cross-att-type", "std", "--rec-func", "0",
            "--share-all-embedding", "1", "--residual-dropout", str(case.get("dropout", 0.1)),
            "--attention-dropout", "0", "--ffn-dropout", "0"]


def _numba_stand_in():
    """A module ``numba`` whose decorators give functions that raise when called."""
    stand_in = types.ModuleType("numba")

    def njit(*args, **kwargs):
        def unavailable(*a, **k):
            raise RuntimeError("numba is not installed: thseq's batching by size is unavailable")

        return unavailable if args and callable(args[0]) else (lambda function: unavailable)

    stand_in.njit = stand_in.jit = njit
    return stand_in


def import_thseq(clone):
    """thseq's package, its ``Transformer`` and ``Vocabulary``, from the clone."""
    from .peer_clones import require_clone

    require_clone("thseq", clone)
    root = Path(clone).resolve() / "code_RAN"
    for path in (root / "Lunas", root):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    stand_in = None
    if "numba" not in sys.modules:
        try:
            import numba  # noqa: F401
        except ImportError:
            stand_in = sys.modules["numba"] = _numba_stand_in()
    try:
        import thseq
        from thseq.data import Vocabulary
        from thseq.models.transformer.model import Transformer
    finally:
        if stand_in is not None and sys.modules.get("numba") is stand_in:
            del sys.modules["numba"]
    return thseq, Transformer, Vocabulary


class ThseqSide(Side):
    """thseq's RAN-ALL transformer (see the module docstring) at the case's sizes.

    Training: its encoder on the source and its decoder on the batch's decoder input (BOS, which is
    thseq's eos id as its own ``forward`` pads it, then the target shifted right), the log-softmax
    of its logits. Its output layer has a bias (the plugin's has none) and, tied to the embeddings,
    the same weight.

    Decoding (:meth:`greedy`): thseq's own incremental decoding, its decoder in thseq's inference
    mode (``thseq.inference_mode``), where it reads only the newest token, caches each layer's
    values of the recurrent self-attention and the cross-attention's keys and values in the state
    it returns, and recomputes the transitions of its attention matrices (all n rows, every layer)
    at each step; the loop around it is the plugin side's (argmax, padding never chosen, no stop at
    EOS). thseq's beam search (``thseq.search.beamsearch.generate``, behind ``Transformer.infer``)
    is not used: at beam 1 it would add the reordering of the whole state at every step and one
    forced EOS step to the same decoder calls."""

    def __init__(self, case, clone):
        self.thseq, transformer, vocabulary = import_thseq(clone)
        flags = thseq_flags(case)
        parser = argparse.ArgumentParser(conflict_handler="resolve")  # its add_args repeats some
        transformer.add_args(parser)
        args = parser.parse_args(flags)
        vocab = vocabulary(symbols=[f"w{i}" for i in range(case["vocab"] - 4)])
        if len(vocab) != case["vocab"]:
            raise ValueError(f"thseq pads its vocabulary to a multiple of 8: the case's vocab "
                             f"{case['vocab']} is not one")
        if (vocab.pad_id, vocab.eos_id) != (PAD, BOS):
            raise ValueError("thseq's vocabulary ids moved")
        torch.manual_seed(case.get("seed", 1))
        model = transformer.build(args, [vocab, vocab])
        super().__init__(model, case, {"flags": flags})

    def log_probs(self, batch):
        state = self.model.encode(batch["src"])
        logits, _ = self.model.decode(batch["prev"], state)
        return F.log_softmax(logits, dim=-1)

    def greedy(self, batch, length):
        with self.thseq.inference_mode(True):
            state = self.model.encode(batch["src"])
            tokens = torch.full((batch["src"].size(0), 1), BOS, dtype=torch.long)
            for _ in range(length):
                logits, state = self.model.decode(tokens, state)
                logits = logits[:, -1]
                logits[:, PAD] = float("-inf")
                tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        return tokens[:, 1:]
