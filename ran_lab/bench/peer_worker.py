"""One side of the peer benchmark (:mod:`ran_lab.bench.peers`): a model, its batch, a training
step and greedy decoding, in a process of its own.

``python -m ran_lab.bench.peer_worker`` reads one JSON command per line on stdin and answers one
JSON line on the stream it was given (stdout at start; anything the models print goes to stderr):
``{"cmd": "setup", "side": ..., "case": {...}, "clone": PATH}`` builds the model and the batch,
``{"cmd": "train"}`` times one training step (forward, backward, optimizer step),
``{"cmd": "decode"}`` one greedy decoding of the batch's sources, ``{"cmd": "memory"}`` the peak
resident set since setup, ``{"cmd": "saved"}`` the tensors kept for the backward pass,
``{"cmd": "kernels"}`` the aten operators of a training forward and backward pass, ``{"cmd": "quit"}`` ends it. The same :class:`Side` objects run
in-process in the tests.

Sides: ``plugin`` (ran_fairseq's architecture of the case), ``attn2d`` (Elbayad et al.'s code at
the pinned commit, from a local clone), ``attn2d-fairseq`` (their later fairseq port, likewise;
:mod:`ran_lab.bench.peer_attn2d_fairseq`), ``thseq`` (Zeng et al.'s, likewise;
:mod:`ran_lab.bench.peer_thseq`), ``stub`` (:class:`StubSide`, for testing the harness without a
clone) and any ``module:function`` returning a :class:`Side`. Every side trains with the
same loss (the sum of the target tokens' negative log-likelihoods, padding left out) and
``torch.optim.Adam``, on the same token ids; the models' own embeddings, dropout and weights.
"""
import importlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .peer_side import BOS, EOS, FIRST_WORD, PAD, Side, make_batch, nll  # noqa: F401


# ---- the plugin ------------------------------------------------------------------------------

def plugin_flags(case):
    """fairseq-train flags of the plugin's model for a case: the architecture at the case's sizes
    (as the peer's), then the case's ``plugin_flags`` (the architecture's own options, e.g. a
    system of configs/ran/systems.json)."""
    arch = case["arch"]
    if arch == "pervasive_attention":
        p = str(case.get("dropout", 0.2))
        flags = ["--arch", "pervasive_attention", "--num-layers", str(case["layers"]),
                 "--growth-rate", str(case["growth_rate"]),
                 "--kernel-size", str(case["kernel_size"]),
                 "--encoder-embed-dim", str(case["embed_dim"]),
                 "--decoder-embed-dim", str(case["embed_dim"]), "--aggregator", "max",
                 "--share-decoder-input-output-embed", "--dropout", p,
                 "--embedding-dropout", p, "--output-dropout", p,
                 "--max-source-positions", "1024", "--max-target-positions", "1024"]
    elif arch == "ran_transformer":
        # one vocabulary and one embedding matrix for source, target and output, as the CPU
        # recipe (configs/ran/cpu.json) and the authors' --share-all-embedding 1
        d = str(case["embed_dim"])
        flags = ["--arch", "ran_transformer", "--encoder-layers", str(case["layers"]),
                 "--decoder-layers", str(case["layers"]), "--encoder-embed-dim", d,
                 "--decoder-embed-dim", d, "--encoder-ffn-embed-dim", str(case["ffn_dim"]),
                 "--decoder-ffn-embed-dim", str(case["ffn_dim"]),
                 "--encoder-attention-heads", str(case["heads"]),
                 "--decoder-attention-heads", str(case["heads"]),
                 "--dropout", str(case.get("dropout", 0.1)), "--share-all-embeddings"]
    else:
        raise ValueError(f"no plugin model for arch {arch!r}")
    return flags + list(case.get("plugin_flags", []))


class _Task:
    """The dictionaries a fairseq model is built from: ``vocab`` entries, pad/eos as above."""

    def __init__(self, vocab):
        from fairseq.data import Dictionary

        self.source_dictionary, self.target_dictionary = Dictionary(), Dictionary()
        for d in (self.source_dictionary, self.target_dictionary):
            for i in range(vocab - len(d)):
                d.add_symbol(f"w{i}")
            assert (d.pad(), d.eos()) == (PAD, 2), "fairseq's dictionary ids moved"


class PluginSide(Side):
    """ran_fairseq's model, called as fairseq's trainer and sequence generator call it."""

    def __init__(self, case):
        from fairseq import options

        from ran_lab import plugin

        plugin.load()
        args = options.parse_args_and_arch(
            options.get_training_parser(),
            ["unused-data", "--task", "translation", *plugin_flags(case)])
        from fairseq.models import ARCH_MODEL_REGISTRY

        torch.manual_seed(case.get("seed", 1))
        model = ARCH_MODEL_REGISTRY[args.arch].build_model(args, _Task(case["vocab"]))
        super().__init__(model, case, {"flags": plugin_flags(case)})

    def log_probs(self, batch):
        logits, _ = self.model(batch["src"], batch["src_lengths"], batch["prev"])
        return F.log_softmax(logits, dim=-1)

    def greedy(self, batch, length):
        # fairseq's eos (2) starts the target, as its sequence generator does
        model = self.model
        encoder_out = model.encoder(batch["src"], src_lengths=batch["src_lengths"])
        tokens = torch.full((batch["src"].size(0), 1), 2, dtype=torch.long)
        state = {}
        for _ in range(length):
            logits, _ = model.decoder(tokens, encoder_out, incremental_state=state)
            logits = logits[:, -1]
            logits[:, PAD] = float("-inf")
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        return tokens[:, 1:]


# ---- Elbayad et al.'s code (attn2d) -----------------------------------------------------------

def attn2d_params(case):
    """The configuration of attn2d's ``Convs2s2D`` (the paper's model: one DenseNet block of
    batch-normalized masked convolutions, max pooling over the source) at the case's sizes, with
    the plugin's choices where the code has options: no biases in the convolutions, the output
    tied to the target embeddings through a linear map to d, the case's dropout everywhere (0.2
    unless it says)."""
    d, k, p = case["embed_dim"], case["kernel_size"], case.get("dropout", 0.2)
    embedding = {"type": "embedding", "input_dim": d, "encode_length": 0, "encode_position": 0,
                 "input_dropout": p, "max_length": 1024}
    return {
        "encoder": dict(embedding),
        "decoder": dict(embedding, tie_target_weights=1, copy_source_weights=0,
                        prediction_dropout=p),
        "network": {"type": "densenet", "kernels": [k], "kernel": k,
                    "num_layers": [case["layers"]], "growth_rate": case["growth_rate"],
                    "bn_size": 4, "conv_dropout": p, "bias": 0, "init_weights": 1},
        "aggregator": {"mode": "max"},
    }


class Attn2dSide(Side):
    """attn2d's ``nmt.models.convs2s2D.Convs2s2D``, imported from the clone's ``nmt`` package
    (plain PyTorch modules: no fairseq). Its greedy decoding (``sample``) moves new tensors to
    CUDA; on a CPU ``Tensor.cuda`` is made the identity in this process."""

    def __init__(self, case, clone):
        from .peer_clones import require_clone

        require_clone("attn2d", clone)
        sys.path.insert(0, str(Path(clone).resolve()))
        if not torch.cuda.is_available():
            torch.Tensor.cuda = lambda self, *args, **kwargs: self
        from nmt.models.convs2s2D import Convs2s2D

        torch.manual_seed(case.get("seed", 1))
        # EOS is an id no prediction takes: decoding runs to the length asked, as the plugin's
        model = Convs2s2D("peer", attn2d_params(case), case["vocab"], case["vocab"],
                          {"PAD": PAD, "BOS": BOS, "EOS": -1})
        model.init_weights()
        super().__init__(model, case, {"params": attn2d_params(case)})

    @staticmethod
    def _side(tokens, lengths):
        return {"labels": tokens, "lengths": lengths}

    def log_probs(self, batch):
        return self.model(self._side(batch["src"], batch["src_lengths"]),
                          self._side(batch["prev"], batch["tgt_lengths"]))

    def greedy(self, batch, length):
        seq, _ = self.model.sample(self._side(batch["src"], batch["src_lengths"]), None,
                                   {"beam_size": 1, "max_length_a": 0, "max_length_b": length})
        return seq


# ---- a stand-in peer (tests of the harness) ---------------------------------------------------

class StubSide(Side):
    """A peer that needs no clone, for testing the harness: an embedding of the source's mean
    token, one per target position, and a linear map to the vocabulary."""

    def __init__(self, case):
        torch.manual_seed(case.get("seed", 1))
        d = case.get("embed_dim", 8)
        model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(case["vocab"], d),
                                     "out": torch.nn.Linear(d, case["vocab"])})
        super().__init__(model, case, {"stub": True})

    def log_probs(self, batch):
        context = self.model["embed"](batch["src"]).mean(1, keepdim=True)
        hidden = self.model["embed"](batch["prev"]) + context
        return F.log_softmax(self.model["out"](hidden), dim=-1)

    def greedy(self, batch, length):
        tokens = torch.full((batch["src"].size(0), 1), BOS, dtype=torch.long)
        for _ in range(length):
            step = self.log_probs({"src": batch["src"], "prev": tokens})[:, -1]
            tokens = torch.cat([tokens, step.argmax(-1, keepdim=True)], dim=1)
        return tokens[:, 1:]


# ---- the worker process -----------------------------------------------------------------------

def build_side(side, case, clone=None):
    if side == "plugin":
        return PluginSide(case)
    if side == "attn2d":
        return Attn2dSide(case, clone)
    if side == "attn2d-fairseq":
        from .peer_attn2d_fairseq import Attn2dFairseqSide

        return Attn2dFairseqSide(case, clone)
    if side == "thseq":
        from .peer_thseq import ThseqSide

        return ThseqSide(case, clone)
    if side == "stub":
        return StubSide(case)
    if ":" in side:
        module, function = side.split(":", 1)
        return getattr(importlib.import_module(module), function)(case)
    raise ValueError(f"unknown side {side!r}")


def _status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def reset_peak():
    """Reset the resident-set high-water mark (VmHWM) where the kernel lets us; False if not."""
    from .worker import release_free_heap

    release_free_heap()
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def memory_now():
    """(current RSS, peak RSS since the last reset) in MiB."""
    import resource

    current = _status_kib("VmRSS")
    peak = _status_kib("VmHWM")
    if current is None:  # no /proc: the process-lifetime peak only
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1024, peak / 1024
    return current / 1024, peak / 1024


class Worker:
    """The commands of the protocol on one :class:`Side`."""

    def __init__(self):
        self.side = None
        self.rss_before = None

    def handle(self, command):
        cmd = command["cmd"]
        if cmd == "setup":
            torch.set_num_threads(command.get("threads", 1))
            self.side = build_side(command["side"], command["case"], command.get("clone"))
            self.rss_before = memory_now()[0]
            resettable = reset_peak()
            return {"info": self.side.info, "rss_before_mib": self.rss_before,
                    "peak_resettable": resettable, "torch": torch.__version__}
        if cmd in ("train", "decode"):
            start = time.perf_counter()
            value = self.side.train_step() if cmd == "train" else self.side.decode()
            return {"seconds": time.perf_counter() - start, "value": value}
        if cmd == "saved":
            return {"saved_mib": self.side.saved_bytes() / 2**20}
        if cmd == "kernels":
            return {"kernels": self.side.kernels()}
        if cmd == "memory":
            current, peak = memory_now()
            return {"rss_mib": current, "peak_mib": peak,
                    "increment_mib": peak - self.rss_before}
        raise ValueError(f"unknown command {cmd!r}")


def main():
    # The protocol's stream is the stdout we were given; whatever the models print goes to stderr.
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker()
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        try:
            answer = {"ok": True, **worker.handle(command)}
        except Exception as error:  # the parent reports it with the side's name
            import traceback

            traceback.print_exc()
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
