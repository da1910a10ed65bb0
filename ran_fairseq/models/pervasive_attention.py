"""``pervasive_attention``: the 2D convolutional translation model of Elbayad et al. 2018,
"Pervasive Attention: 2D Convolutional Neural Networks for Sequence-to-Sequence Prediction".

Target and source embeddings meet at every cell of the grid, X_ij = [y_i; x_j] (Eq. 1); a DenseNet
of masked 2D convolutions (:mod:`ran_fairseq.modules.densenet2d`, §3.1) lets row i see target rows
≤ i and the whole source; the aggregator pools each row over the source (Eqs. 2-3, 8-9,
:mod:`ran_fairseq.modules.aggregators`) and E projects it to the vocabulary (Eqs. 5-6). The
"encoder" (:class:`SourceEmbedder`) only embeds the source, for fairseq's beam search;
:class:`PervasiveAttentionDecoder` builds the grid and runs the rest, one new grid row per layer
per decoding step. docs/pervasive_attention.md gives the flags and the choices where the paper is
silent.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.dataclass import ChoiceEnum
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.modules import PositionalEmbedding

from ..modules.aggregators import AGGREGATORS, SourceAggregator
from ..modules.densenet2d import GATINGS, DenseNet2d
from ._common import (
    PluginConfig,
    PluginModel,
    current_options,
    fill,
    positive,
    probability,
    require,
    saved_version,
)

POSITIONAL_EMBEDDINGS = ("none", "learned", "sinusoidal")
# training memory grows with |s| × |t|: above this many cells per pair, a warning (docs/pitfalls.md)
GRID_CELLS_WARNING = 100 * 100

logger = logging.getLogger(__name__)


def Embedding(num_embeddings: int, dim: int, padding_idx: int) -> nn.Embedding:
    m = nn.Embedding(num_embeddings, dim, padding_idx=padding_idx)
    nn.init.normal_(m.weight, mean=0, std=dim ** -0.5)
    nn.init.zeros_(m.weight[padding_idx])
    return m


def _positions(kind: str, max_positions: int, dim: int, padding_idx: int):
    if kind not in POSITIONAL_EMBEDDINGS:
        raise ValueError(f"--positional-embeddings must be one of "
                         f"{', '.join(POSITIONAL_EMBEDDINGS)}, got {kind!r}")
    if kind == "none":
        return None
    return PositionalEmbedding(max_positions, dim, padding_idx, learned=kind == "learned")


class SourceEmbedder(FairseqEncoder):
    """The model's "encoder": source embeddings x_j (d_s), optional positions, dropout; no
    layers. Returns fairseq's encoder-output dict: ``encoder_out`` [(S, B, d_s)],
    ``encoder_padding_mask`` [(B, S), True at padding], ``src_lengths`` [(B,)]."""

    def __init__(self, args, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.padding_idx = embed_tokens.padding_idx
        self.max_source_positions = args.max_source_positions
        self.embed_positions = _positions(args.positional_embeddings, args.max_source_positions,
                                          embed_tokens.embedding_dim, self.padding_idx)
        self.dropout = args.embedding_dropout

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **unused):
        x = self.embed_tokens(src_tokens)
        if self.embed_positions is not None:
            x = x + self.embed_positions(src_tokens)
        x = F.dropout(x, self.dropout, self.training)
        return {
            "encoder_out": [x.transpose(0, 1)],
            "encoder_padding_mask": [src_tokens.eq(self.padding_idx)],
            "encoder_embedding": [],
            "encoder_states": [],
            "src_tokens": [],
            "src_lengths": [] if src_lengths is None else [src_lengths],
        }

    def reorder_encoder_out(self, encoder_out: Dict, new_order: Tensor) -> Dict:
        reordered = dict(encoder_out)
        reordered["encoder_out"] = [x.index_select(1, new_order)
                                    for x in encoder_out["encoder_out"]]
        for key in ("encoder_padding_mask", "src_lengths"):
            reordered[key] = [x.index_select(0, new_order) for x in encoder_out[key]]
        return reordered

    def max_positions(self) -> int:
        if self.embed_positions is None:
            return self.max_source_positions
        return min(self.max_source_positions, self.embed_positions.max_positions)


class PervasiveAttentionDecoder(FairseqIncrementalDecoder):
    """Builds the grid X_ij = [y_i; x_j] (Eq. 1) from the target prefix and the source
    embeddings, runs the DenseNet, aggregates over the source axis and projects to the
    vocabulary. ``forward`` returns logits (B, T, V) and ``{"attn": [weights (B, T, S)]}`` (the
    weights are None in training unless asked for)."""

    def __init__(self, args, dictionary, embed_tokens: nn.Embedding, source_dim: int):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.padding_idx = embed_tokens.padding_idx
        self.max_target_positions = args.max_target_positions
        target_dim = embed_tokens.embedding_dim
        self.embed_positions = _positions(args.positional_embeddings, args.max_target_positions,
                                          target_dim, self.padding_idx)
        self.embedding_dropout = args.embedding_dropout
        self.output_dropout = args.output_dropout
        self.recompute_grid = args.recompute_grid
        self.densenet = DenseNet2d(target_dim + source_dim, args.num_layers, args.growth_rate,
                                   args.kernel_size, dropout=args.dropout,
                                   gated_convolutions=args.gated_convolutions,
                                   memory_efficient_densenet=args.memory_efficient_densenet)
        # the module is the aggregator: its argument is which one (--aggregator)
        self.aggregator = SourceAggregator(args.aggregator, self.densenet.out_channels)
        features = self.aggregator.out_channels
        self.share_input_output_embed = args.share_decoder_input_output_embed
        if self.share_input_output_embed:
            # E = (target embeddings) · P: the pooled features are mapped to d_t first.
            self.project_out = nn.Linear(features, target_dim, bias=False)
            nn.init.normal_(self.project_out.weight, std=features ** -0.5)
            self.output_projection = None
        else:
            self.project_out = None
            self.output_projection = nn.Linear(features, len(dictionary), bias=False)
            nn.init.normal_(self.output_projection.weight, std=features ** -0.5)

    def forward(self, prev_output_tokens: Tensor, encoder_out: Optional[Dict] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                features_only: bool = False, **unused):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens: Tensor, encoder_out: Optional[Dict] = None,
                         incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                         **unused):
        """Pooled features (B, T, C') (T = 1 in an incremental step) and ``{"attn": [...]}``."""
        if encoder_out is None or not encoder_out.get("encoder_out"):
            raise ValueError("the pervasive-attention decoder needs the source embeddings "
                             "(encoder_out from SourceEmbedder)")
        source = encoder_out["encoder_out"][0].transpose(0, 1)  # (B, S, d_s)
        source_padding = encoder_out["encoder_padding_mask"][0]  # (B, S)
        if source.size(0) != prev_output_tokens.size(0):
            raise ValueError(f"{prev_output_tokens.size(0)} target prefixes for "
                             f"{source.size(0)} source sentences; reorder the encoder output "
                             f"together with the incremental state")
        cached = incremental_state is not None and not self.recompute_grid
        tokens = prev_output_tokens[:, -1:] if cached else prev_output_tokens
        target = self.embed_tokens(tokens)
        if self.embed_positions is not None:
            target = target + self.embed_positions(
                prev_output_tokens, incremental_state=incremental_state if cached else None)
        target = F.dropout(target, self.embedding_dropout, self.training)

        rows, columns = tokens.size(1), source.size(1)
        grid = _grid(target, source, rows, columns)
        padding = tokens.eq(self.padding_idx).unsqueeze(2) | source_padding.unsqueeze(1)
        features = self.densenet(grid, padding, incremental_state if cached else None)
        # the DenseNet's output is a ReLU's, zero at padding: pooling need not mask it
        pooled, attn = self.aggregator(features, source_padding, need_weights=not self.training,
                                       rectified=True)
        if attn is not None and attn.dim() == 4:  # (1, B, T, S) when per-head weights were asked
            attn = attn.mean(0)
        if incremental_state is not None and not cached:  # --recompute-grid: the newest row
            pooled = pooled[:, -1:]
            attn = attn[:, -1:] if attn is not None else None
        pooled = F.dropout(pooled, self.output_dropout, self.training)
        return pooled, {"attn": [attn], "inner_states": None}

    def output_layer(self, features: Tensor) -> Tensor:
        """E: pooled features (B, T, C') → logits (B, T, V)."""
        if self.project_out is not None:
            return F.linear(self.project_out(features), self.embed_tokens.weight)
        return self.output_projection(features)

    def output_rows(self, tokens: Tensor) -> Tensor:
        """E_w (B, T, C'): the row of E (Eq. 4) that gives each token's logit from the pooled
        features, e_w = E_w · H^pool; with tied embeddings E = (target embeddings) · P."""
        if self.project_out is not None:
            return self.embed_tokens(tokens) @ self.project_out.weight
        return F.embedding(tokens, self.output_projection.weight)

    def max_positions(self) -> int:
        if self.embed_positions is None:
            return self.max_target_positions
        return min(self.max_target_positions, self.embed_positions.max_positions)


# The grid in channels-last memory (the channels of a cell adjacent), which the DenseNet's tensors
# keep: on a CPU oneDNN's convolutions, the 1×1 ones above all, run faster in it than in
# channels-first memory. False builds it channels first (the reference; same values).
CHANNELS_LAST_GRID = True


def _grid(target: Tensor, source: Tensor, rows: int, columns: int) -> Tensor:
    """Eq. 1: X_ij = [y_i; x_j], (B, d_t + d_s, T, S), from y (B, T, d_t) and x (B, S, d_s)."""
    if CHANNELS_LAST_GRID:
        return torch.cat([target.unsqueeze(2).expand(-1, -1, columns, -1),
                          source.unsqueeze(1).expand(-1, rows, -1, -1)], dim=3).permute(0, 3, 1, 2)
    return torch.cat([target.transpose(1, 2).unsqueeze(3).expand(-1, -1, -1, columns),
                      source.transpose(1, 2).unsqueeze(2).expand(-1, -1, rows, -1)], dim=1)


def _option(default, help, **metadata):
    return field(default=default, metadata={"help": help, **metadata})


SET_BY_ARCH = "; set by --arch"


@dataclass
class PervasiveAttentionConfig(PluginConfig):
    """``pervasive_attention``'s options; the sizes that are None are the named architecture's."""

    aggregator: Optional[ChoiceEnum(AGGREGATORS)] = _option(
        "max", "pooling over the source axis: max (Eq. 2), avg (Eq. 3, 1/sqrt|s|), attn (Eqs. "
               "8-9) or max-attn (both, concatenated)")
    num_layers: Optional[int] = _option(None, "DenseNet layers" + SET_BY_ARCH)
    growth_rate: Optional[int] = _option(
        None, "channels each DenseNet layer adds (its 1x1 bottleneck has 4G)" + SET_BY_ARCH)
    kernel_size: Optional[int] = _option(
        None, "odd size k of the masked convolution: k source columns x ceil(k/2) target rows "
              "(the current one and k//2 before it)" + SET_BY_ARCH)
    gated_convolutions: Optional[ChoiceEnum(GATINGS)] = _option(
        "none", "gated linear units in each DenseNet layer: 'masked' (the value when the flag is "
                "given alone) gates the masked k x k convolution, which matches the paper's "
                "Table 1 count (9.64M); 'both' gates the 1x1 convolution too, as the paper's "
                "text says", argparse_const="masked")
    memory_efficient_densenet: Optional[bool] = _option(
        False, "recompute each layer's concatenation, batch norms, ReLUs and 1x1 convolution "
               "(all before the masked convolution) in the backward pass instead of storing them")
    encoder_embed_dim: Optional[int] = _option(None, "source embedding size d_s" + SET_BY_ARCH)
    decoder_embed_dim: Optional[int] = _option(None, "target embedding size d_t" + SET_BY_ARCH)
    share_decoder_input_output_embed: Optional[bool] = _option(
        False, "tie the output projection to the target embeddings (the pooled features are "
               "projected to d_t first)")
    positional_embeddings: Optional[ChoiceEnum(POSITIONAL_EMBEDDINGS)] = _option(
        "none", "positional embeddings added to both sides' token embeddings (not in the paper)")
    dropout: Optional[float] = _option(0.2, "dropout after each masked convolution")
    embedding_dropout: Optional[float] = _option(0.2, "dropout on the source and target embeddings")
    output_dropout: Optional[float] = _option(0.2, "dropout on the pooled features before E")
    recompute_grid: Optional[bool] = _option(
        False, "incremental decoding recomputes the whole grid at every step instead of one row "
               "per layer (a speed baseline)")
    # the task's length limits, which the model reads too (the grid's size, positions)
    max_source_positions: Optional[int] = _option(1024, "the longest source sentence (tokens) trained on")
    max_target_positions: Optional[int] = _option(1024, "the longest target sentence (tokens) trained on")


def base_architecture(args):
    """The paper's sizes (``--arch pervasive_attention``)."""
    current_options(args)
    fill(args, num_layers=24, growth_rate=32, kernel_size=5, encoder_embed_dim=128,
         decoder_embed_dim=128)


@register_model("pervasive_attention", dataclass=PervasiveAttentionConfig)
class PervasiveAttentionModel(PluginModel, FairseqEncoderDecoderModel):
    """Pervasive Attention (Elbayad et al. 2018); see the module docstring."""

    base_architecture = staticmethod(base_architecture)

    @classmethod
    def upgrade_args(cls, args):
        """A namespace of options version 1 may hold --gated-convolutions as a bool (saved before
        the option took a value): True gated both convolutions of each layer."""
        if saved_version(args) < 2 and isinstance(getattr(args, "gated_convolutions", None),
                                                   bool):
            args.gated_convolutions = "both" if args.gated_convolutions else "none"

    @classmethod
    def check_args(cls, args):
        positive(args, "num_layers", "growth_rate", "encoder_embed_dim", "decoder_embed_dim",
                 "max_source_positions", "max_target_positions")
        require(args, "kernel_size", lambda v: v >= 1 and v % 2 == 1,
                "must be odd (the masked convolution is centred on the source axis)")
        probability(args, "dropout", "embedding_dropout", "output_dropout")

    @classmethod
    def build_model(cls, cfg, task):
        args = cls.checked_args(cfg)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder = SourceEmbedder(
            args, src_dict, Embedding(len(src_dict), args.encoder_embed_dim, src_dict.pad()))
        decoder = PervasiveAttentionDecoder(
            args, tgt_dict, Embedding(len(tgt_dict), args.decoder_embed_dim, tgt_dict.pad()),
            source_dim=args.encoder_embed_dim)
        model = cls(encoder, decoder)
        model.training_length_cap = (args.max_source_positions, args.max_target_positions)
        model.add_version_buffer()
        return model

    def train(self, mode: bool = True):
        """As nn.Module.train; the first switch to training mode warns when the longest
        sentence pair allowed makes a large grid (memory grows with |s| × |t|)."""
        cap = getattr(self, "training_length_cap", None)
        if mode and cap is not None and cap[0] * cap[1] > GRID_CELLS_WARNING:
            logger.warning(
                f"pervasive_attention: training memory grows with source length × target length "
                f"(the DenseNet's activations cover the whole {cap[0]}×{cap[1]} grid of the "
                f"longest pair allowed); training pairs are capped only by "
                f"--max-source-positions {cap[0]} and --max-target-positions {cap[1]}. Lower them "
                f"(e.g. to 100; longer pairs are then left out of training) or add "
                f"--memory-efficient-densenet if memory runs out (docs/pitfalls.md).")
            self.training_length_cap = None  # once
        return super().train(mode)

    def complexity(self, source_length: int, target_length: int,
                   include_masked_weights: bool = False) -> Dict[str, int]:
        """Parameters, and multiply-adds of one sentence pair's teacher-forced forward pass with
        |s| = ``source_length`` and |t| = ``target_length`` tokens: the convolutions at every grid
        cell, the attention aggregator's scores and weighted sums, and E at every target
        position (batch norm, ReLU, pooling and softmax are not counted). ``flops`` is
        2 × multiply-adds. With ``include_masked_weights``, the always-zero future half of the
        paper's k×k kernels is counted too (parameters and multiply-adds), as a dense masked
        implementation would store and compute it."""
        densenet, aggregator = self.decoder.densenet, self.decoder.aggregator
        cells = source_length * target_length
        params = sum(p.numel() for p in self.parameters())
        macs = 0
        for layer in densenet.layers:
            spatial = layer.conv2.weight.numel()
            if include_masked_weights:
                spatial += layer.conv2.masked_weights
            macs += cells * (layer.conv1.weight.numel() + spatial)
        if aggregator.score is not None:
            macs += 2 * cells * aggregator.channels
        if self.decoder.project_out is not None:
            projection = (self.decoder.project_out.weight.numel()
                          + self.decoder.embed_tokens.weight.numel())
        else:
            projection = self.decoder.output_projection.weight.numel()
        macs += target_length * projection
        if include_masked_weights:
            params += densenet.masked_weights()
        return {"parameters": params, "multiply_adds": macs, "flops": 2 * macs}


@register_model_architecture("pervasive_attention", "pervasive_attention_small")
def pervasive_attention_small(args):
    current_options(args)
    fill(args, num_layers=8, growth_rate=16, kernel_size=3, encoder_embed_dim=64,
         decoder_embed_dim=64)
    base_architecture(args)
