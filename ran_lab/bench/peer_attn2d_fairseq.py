"""attn2d's fairseq port of Pervasive Attention (https://github.com/elbayadm/attn2d, the repository's
tip: ``examples/pervasive``) as a side of the peer benchmark (:mod:`ran_lab.bench.peers`).

The port's DenseNet is ``examples/pervasive/modules/archive/densenet.py`` (batch-normalized dense
layers, as the paper's: BN → ReLU → 1×1 conv to 4g → BN → ReLU → masked k×k conv to g → dropout,
each layer concatenating its g channels to its input; the block's closing BN → ReLU) and its
pooling the ``max`` aggregator of ``examples/pervasive/modules/aggregators.py``. Only those two
files are read from the clone, at run time; the rest of the port (its model, registries and
controllers) targets a fairseq fork whose APIs the installed fairseq has not, so the model around
them is the small adapter here, wired as the port's ``PervasiveDecoder`` wires its convnets:

- source and target embeddings scaled by √d, the grid X_ij = [x_j; y_i] built channels last
  (B, T, S, 2d) and handed to the DenseNet as the permuted view (B, 2d, T, S), as the port's
  convnets permute it (so the DenseNet's tensors keep the channels-last strides);
- the DenseNet at the case's sizes with the plugin's choices where it has options: one block, no
  channel reduction before it and no transition after it, no biases, dropout after each masked
  convolution;
- the features permuted back to (B, T, S, C), max-pooled over the source by the port's
  aggregator, mapped to d (a linear layer with a bias) and to the vocabulary through the target
  embeddings (``--share-decoder-input-output-embed``; the output layer has a bias).

The archive DenseNet imports ``MaskedConvolution(mask, in, out, kernel_size, padding, bias)`` from
the fork's ``fairseq.modules``, which no released fairseq has: :class:`MaskedConvolution` here
stands in for it with the authors' masked-convolution semantics (a k×k ``nn.Conv2d`` whose future
kernel rows are zeroed in place before each forward pass), for the time of that import only. The
DenseNet has no padding masks and no incremental decoding: padded cells are computed like the
others, and greedy decoding runs the whole grid of the prefix at every step.
"""
import argparse
import importlib.util
import math
import sys
import types
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .peer_side import BOS, PAD, Side

DENSENET = "examples/pervasive/modules/archive/densenet.py"
AGGREGATORS = "examples/pervasive/modules/aggregators.py"
PACKAGE = "_attn2d_fairseq_port"  # the synthetic package the two files are loaded into


class MaskedConvolution(nn.Conv2d):
    """The fork's masked convolution as the archive DenseNet calls it: a k×k convolution with
    ``padding`` on every side whose weights are multiplied by ``mask`` (the future target rows
    at zero) in place before each forward pass."""

    def __init__(self, mask, in_channels, out_channels, kernel_size, padding, bias=False):
        super().__init__(in_channels, out_channels, kernel_size, padding=padding, bias=bias)
        self.register_buffer("mask", mask)

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_port(clone):
    """(the archive ``DenseNet`` class, the ``MAX`` aggregator class) from the clone."""
    from .peer_clones import require_clone

    require_clone("attn2d-fairseq", clone)
    root = Path(clone).resolve()
    package = types.ModuleType(PACKAGE)
    package.__path__ = []
    # the registries of examples/pervasive/modules/__init__.py, as plain decorators
    package.register_aggregator = package.register_convnet = lambda name: (lambda cls: cls)
    sys.modules[PACKAGE] = package
    aggregators = _load(root / AGGREGATORS, f"{PACKAGE}.aggregators")
    import fairseq.modules  # noqa: F401  (the real one, restored below)

    stand_in = types.ModuleType("fairseq.modules")
    stand_in.MaskedConvolution = MaskedConvolution
    real = sys.modules["fairseq.modules"]
    sys.modules["fairseq.modules"] = stand_in
    try:
        densenet = _load(root / DENSENET, f"{PACKAGE}.densenet")
    finally:
        sys.modules["fairseq.modules"] = real
    return densenet.DenseNet, aggregators.MAX


def densenet_args(case):
    """The archive DenseNet's options at the case's sizes (see the module docstring)."""
    return argparse.Namespace(num_layers=case["layers"], kernel_size=case["kernel_size"],
                              bn_size=4, growth_rate=case["growth_rate"],
                              dropout=case.get("dropout", 0.2), init_weights="manual",
                              divide_channels=1, num_blocks=1, skip_last_trans=True)


def _embedding(vocab, dim):
    m = nn.Embedding(vocab, dim, padding_idx=PAD)
    nn.init.normal_(m.weight, std=dim ** -0.5)
    nn.init.zeros_(m.weight[PAD])
    return m


class PortModel(nn.Module):
    """The port's DenseNet and max pooling between embeddings and the tied output layer."""

    def __init__(self, case, densenet_class, max_class):
        super().__init__()
        d, vocab = case["embed_dim"], case["vocab"]
        self.dropout = case.get("dropout", 0.2)
        self.scale = math.sqrt(d)
        self.source_embed, self.target_embed = _embedding(vocab, d), _embedding(vocab, d)
        args = densenet_args(case)
        self.net = densenet_class(2 * d, args)
        self.aggregator = max_class(args, self.net.output_channels)
        self.projection = nn.Linear(self.net.output_channels, d)
        nn.init.normal_(self.projection.weight, std=self.net.output_channels ** -0.5)
        nn.init.zeros_(self.projection.bias)
        self.prediction = nn.Linear(d, vocab)
        self.prediction.weight = self.target_embed.weight
        nn.init.zeros_(self.prediction.bias)

    def forward(self, src, prev):
        source = F.dropout(self.scale * self.source_embed(src), self.dropout, self.training)
        target = F.dropout(self.scale * self.target_embed(prev), self.dropout, self.training)
        rows, columns = prev.size(1), src.size(1)
        grid = torch.cat([source.unsqueeze(1).expand(-1, rows, -1, -1),
                          target.unsqueeze(2).expand(-1, -1, columns, -1)], dim=3)
        features = self.net(grid.permute(0, 3, 1, 2))  # (B, C, T, S), channels-last strides
        pooled, _ = self.aggregator(features.permute(0, 2, 3, 1))  # (B, T, C)
        pooled = F.dropout(self.projection(pooled), self.dropout, self.training)
        return self.prediction(pooled)


class Attn2dFairseqSide(Side):
    """The port's DenseNet and aggregator from a clone (see the module docstring)."""

    def __init__(self, case, clone):
        densenet_class, max_class = load_port(clone)
        torch.manual_seed(case.get("seed", 1))
        model = PortModel(case, densenet_class, max_class)
        super().__init__(model, case, {"densenet": vars(densenet_args(case)),
                                       "files": [DENSENET, AGGREGATORS]})

    def log_probs(self, batch):
        return F.log_softmax(self.model(batch["src"], batch["prev"]), dim=-1)

    def greedy(self, batch, length):
        tokens = torch.full((batch["src"].size(0), 1), BOS, dtype=torch.long)
        for _ in range(length):
            logits = self.model(batch["src"], tokens)[:, -1]
            logits[:, PAD] = float("-inf")
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        return tokens[:, 1:]
