"""``ran_transformer``: fairseq's transformer with input-independent self-attention (Zeng et al.
2021, "Recurrent Attention for Neural Machine Translation") and its baselines.

``--encoder-self-attention`` and ``--decoder-self-attention`` choose each side's: ``ran``
(Eqs. 2-4, :mod:`ran_fairseq.modules.positional_attention`), ``synthesizer``, ``gaussian``
(HC-SA) or ``dot`` (fairseq's). ``--arch ran_transformer`` is RAN-ALL at transformer-base sizes;
the paper's systems are flag settings of it (docs/ran_transformer.md); ``*_iwslt_de_en`` and
``*_small`` are other sizes. :class:`RanTransformerConfig` holds every option and its default.
Sentences longer than n = ``--max-attention-positions`` are filtered or capped by fairseq, since
``max_positions()`` reports at most n on a side with input-independent attention.
"""
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from ..modules.positional_attention import (
    RAN_DECODER_INITIAL,
    RAN_INITIAL_INIT,
    RAN_TRANSITIONS,
    PositionalSelfAttention,
    PositionLimit,
    build_positional_matrices,
)
from ._common import (
    current_options,
    PluginModel,
    TransformerFlags,
    check_transformer_flags,
    positive,
    probability,
    require,
    saved_version,
    small_transformer,
)

logger = logging.getLogger(__name__)

SELF_ATTENTION_TYPES = ("dot", "ran", "gaussian", "synthesizer")
MAX_POSITIONS_FLAG = "--max-attention-positions"


@dataclass
class RanTransformerConfig(TransformerFlags):
    """``ran_transformer``'s options: fairseq's transformer options and these."""

    encoder_self_attention: Optional[ChoiceEnum(SELF_ATTENTION_TYPES)] = field(default="ran", metadata={
        "help": "encoder self-attention: dot, ran, gaussian (HC-SA) or synthesizer (Random "
                "Synthesizer)"})
    decoder_self_attention: Optional[ChoiceEnum(SELF_ATTENTION_TYPES)] = field(default="ran", metadata={
        "help": "decoder self-attention, as --encoder-self-attention"})
    max_attention_positions: Optional[int] = field(default=256, metadata={
        "help": "positions n covered by the input-independent attention matrices (n×n per "
                "head); longer sentences are rejected"})
    positional_attention_dropout: Optional[float] = field(default=0.2, metadata={
        "help": "dropout on the input-independent attention weights (ran, synthesizer, "
                "gaussian)"})
    ran_fixed_initial_matrices: Optional[bool] = field(default=False, metadata={
        "help": "RAN: keep the initial attention matrices at their random initialization "
                "(Table 3 'fixed')"})
    ran_no_layernorm_residual: Optional[bool] = field(default=False, metadata={
        "help": "RAN: transition A_l = tanh(W A_{l-1} + b), without layer normalization and "
                "residual (Table 3 'w/o LN&RES')"})
    ran_decoder_initial: Optional[ChoiceEnum(RAN_DECODER_INITIAL)] = field(
        default="lower-triangle", metadata={
            "help": "RAN decoder: lower-triangle (§2.2, 'only the lower triangular matrix of "
                    "each Initial Attention Matrix is leveraged'): row i of every matrix is "
                    "transitioned and layer-normalized over keys j <= i only, the rest kept at "
                    "zero; full: the whole row is transitioned and the future masked only at the "
                    "softmax (the authors' code)"})
    ran_transition: Optional[ChoiceEnum(RAN_TRANSITIONS)] = field(default="paper", metadata={
        "help": "RAN transition: paper (Eqs. 3-4, LN(tanh(W A + b)) + A) or ffn (the authors' "
                "released code's: A + W2 ReLU(W1 A + b1) + b2, n -> m -> n with m = "
                "--ran-ffn-dim, no layer norm; §2.3 names FFNs as an option)"})
    ran_ffn_dim: Optional[int] = field(default=None, metadata={
        "help": "RAN: hidden width m of --ran-transition ffn (n = --max-attention-positions; "
                "the authors' code uses 1024 whatever n); default 4n"})
    ran_initial_init: Optional[ChoiceEnum(RAN_INITIAL_INIT)] = field(default="normal", metadata={
        "help": "RAN: random initialization of the initial matrices A_0 (§2.2 says 'randomly "
                "initialized'): normal (N(0, n^-1/2)) or xavier (Xavier-uniform over the "
                "(heads, n, n) tensor, as the authors' released code)"})
    gaussian_attention_std: Optional[float] = field(default=1.0, metadata={
        "help": "standard deviation of the HC-SA Gaussians"})
    no_encoder_positional_embeddings: Optional[bool] = field(default=False, metadata={
        "help": "no positional embeddings on the encoder input (Table 2)"})
    no_decoder_positional_embeddings: Optional[bool] = field(default=False, metadata={
        "help": "no positional embeddings on the decoder input (Table 2)"})


def side_matrices(cfg, side):
    """The shared matrix source of ``side`` ("encoder" or "decoder"), or None for dot-product."""
    kind = getattr(cfg, f"{side}_self_attention")
    if kind == "dot":
        return None
    sizes = cfg.encoder if side == "encoder" else cfg.decoder
    matrices = build_positional_matrices(
        kind, sizes.layers, sizes.attention_heads, cfg.max_attention_positions,
        causal=side == "decoder", freeze_initial=cfg.ran_fixed_initial_matrices,
        layernorm_residual=not cfg.ran_no_layernorm_residual,
        gaussian_std=cfg.gaussian_attention_std, ran_transition=cfg.ran_transition,
        ran_decoder_initial=cfg.ran_decoder_initial, ran_initial_init=cfg.ran_initial_init,
        ran_ffn_dim=cfg.ran_ffn_dim)
    matrices.limit_name = (MAX_POSITIONS_FLAG, TOO_LONG_ADVICE)
    return matrices


TOO_LONG_ADVICE = (", or leave longer sentences out with --max-source-positions/"
                   "--max-target-positions and --skip-invalid-size-inputs-valid-test")


class _LayerPlan:
    """The shared matrices and the next layer index, handed to the layers that the fairseq base
    classes build inside their ``__init__`` (a plain object: nn.Module registers nothing here)."""

    def __init__(self, matrices):
        self.matrices = matrices
        self.built = 0

    def next_layer(self):
        self.built += 1
        return self.matrices, self.built - 1


def _wrap(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's layer builders apply them."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params = 0 if cfg.checkpoint_activations else cfg.min_params_to_wrap
    return fsdp_wrap(layer, min_num_params=min_params)


class PositionalEncoderLayer(TransformerEncoderLayerBase):
    """A transformer encoder layer whose self-attention is :class:`PositionalSelfAttention`."""

    def __init__(self, cfg, matrices, layer):
        self._positional = (matrices, layer)  # read by build_self_attention during __init__
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        matrices, layer = self._positional
        return PositionalSelfAttention(embed_dim, cfg.encoder.attention_heads, matrices, layer,
                                       dropout=cfg.positional_attention_dropout)


class PositionalDecoderLayer(TransformerDecoderLayerBase):
    """A transformer decoder layer with a causal :class:`PositionalSelfAttention`."""

    def __init__(self, cfg, matrices, layer, no_encoder_attn=False):
        self._positional = (matrices, layer)  # read by build_self_attention during __init__
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn:
            raise ValueError("input-independent self-attention has no bias_kv or zero_attn")
        matrices, layer = self._positional
        return PositionalSelfAttention(embed_dim, cfg.decoder.attention_heads, matrices, layer,
                                       dropout=cfg.positional_attention_dropout)


def _attention_limit(limit, matrices):
    """The smaller of fairseq's ``limit`` and the n of the attention matrices (None: dot-product),
    carrying its flag into fairseq's messages."""
    if matrices is None or limit < matrices.max_positions:
        return limit
    return PositionLimit(matrices.max_positions, MAX_POSITIONS_FLAG)


def _scope(matrices, incremental_state=None):
    if matrices is None:
        return contextlib.nullcontext()
    return matrices.forward_scope(incremental_state)


class RanTransformerEncoder(TransformerEncoderBase):
    """fairseq's transformer encoder with ``--encoder-self-attention`` in every layer. The matrix
    source is ``self.self_attn_matrices`` (None for dot-product)."""

    def __init__(self, cfg, dictionary, embed_tokens):
        self._plan = _LayerPlan(side_matrices(cfg, "encoder"))
        super().__init__(cfg, dictionary, embed_tokens)
        self.self_attn_matrices = self._plan.matrices
        if cfg.no_encoder_positional_embeddings:
            self.embed_positions = None

    def build_encoder_layer(self, cfg):
        if self._plan.matrices is None:
            return super().build_encoder_layer(cfg)
        return _wrap(PositionalEncoderLayer(cfg, *self._plan.next_layer()), cfg)

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False,
                token_embeddings=None):
        with _scope(self.self_attn_matrices):
            return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)

    def max_positions(self):
        return _attention_limit(super().max_positions(), self.self_attn_matrices)


class RanTransformerDecoder(TransformerDecoderBase):
    """fairseq's transformer decoder with ``--decoder-self-attention`` in every layer. The matrix
    source is ``self.self_attn_matrices`` (None for dot-product)."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False):
        self._plan = _LayerPlan(side_matrices(cfg, "decoder"))
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.self_attn_matrices = self._plan.matrices
        if cfg.no_decoder_positional_embeddings:
            self.embed_positions = None

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if self._plan.matrices is None:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return _wrap(PositionalDecoderLayer(cfg, *self._plan.next_layer(), no_encoder_attn), cfg)

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer=None,
                         alignment_heads=None):
        if full_context_alignment and self.self_attn_matrices is not None:
            raise ValueError("full-context alignment needs a non-causal decoder self-attention; "
                             "use --decoder-self-attention dot")
        with _scope(self.self_attn_matrices, incremental_state):
            return super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                            full_context_alignment, alignment_layer,
                                            alignment_heads)

    def max_positions(self):
        return _attention_limit(super().max_positions(), self.self_attn_matrices)


@register_model("ran_transformer", dataclass=RanTransformerConfig)
class RanTransformerModel(PluginModel, TransformerModel):
    """Transformer with Recurrent Attention (Zeng et al. 2021) or another self-attention per side;
    see the module docstring for the flags and the default (RAN-ALL)."""

    base_architecture = staticmethod(base_architecture)  # fairseq's transformer-base sizes

    @classmethod
    def upgrade_args(cls, args):
        """A namespace saved by options version 1 (no ``options_version``) that records no
        ``ran_decoder_initial`` predates that option: a RAN decoder then transitioned whole
        rows, and keeps ``full``."""
        if saved_version(args) < 2 and not hasattr(args, "ran_decoder_initial") \
                and getattr(args, "decoder_self_attention", "ran") == "ran":
            logger.info("ran_transformer: a checkpoint saved before --ran-decoder-initial "
                        "existed: its RAN decoder transitions whole rows (full)")
            args.ran_decoder_initial = "full"

    @classmethod
    def check_args(cls, args):
        positive(args, "max_attention_positions", "ran_ffn_dim")
        probability(args, "positional_attention_dropout")
        require(args, "gaussian_attention_std", lambda v: v > 0, "must be positive")
        if args.cross_self_attention and args.decoder_self_attention != "dot":
            raise ValueError("--cross-self-attention needs --decoder-self-attention dot")
        if args.ran_transition == "ffn" and args.ran_no_layernorm_residual:
            raise ValueError("--ran-no-layernorm-residual removes the layer norm and residual of "
                             "the paper's transition (Eqs. 3-4); --ran-transition ffn has no "
                             "layer norm: use --ran-transition paper with it")
        if args.ran_ffn_dim is not None and args.ran_transition != "ffn":
            raise ValueError(f"--ran-ffn-dim sets the hidden width of --ran-transition ffn; "
                             f"--ran-transition is {args.ran_transition}")
        defaults = RanTransformerConfig()
        ran_side = "ran" in (args.encoder_self_attention, args.decoder_self_attention)
        for dest in ("ran_transition", "ran_initial_init"):
            value = getattr(args, dest)
            if value != getattr(defaults, dest) and not ran_side:
                raise ValueError(f"--{dest.replace('_', '-')} {value} needs RAN on a side: "
                                 f"--encoder-self-attention ran or --decoder-self-attention ran")
        if args.ran_decoder_initial != defaults.ran_decoder_initial \
                and args.decoder_self_attention != "ran":
            raise ValueError(f"--ran-decoder-initial {args.ran_decoder_initial} applies to a RAN "
                             f"decoder only; --decoder-self-attention is "
                             f"{args.decoder_self_attention}")
        check_transformer_flags(args)

    @classmethod
    def build_model(cls, cfg, task):
        model = super().build_model(cls.checked_args(cfg), task)
        model.add_version_buffer()
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return RanTransformerEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return RanTransformerDecoder(cfg, tgt_dict, embed_tokens,
                                     no_encoder_attn=cfg.no_cross_attention)


@register_model_architecture("ran_transformer", "ran_transformer_iwslt_de_en")
def ran_transformer_iwslt_de_en(args):
    current_options(args)
    transformer_iwslt_de_en(args)


@register_model_architecture("ran_transformer", "ran_transformer_small")
def ran_transformer_small(args):
    current_options(args)
    small_transformer(args)
    base_architecture(args)
