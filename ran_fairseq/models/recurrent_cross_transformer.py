"""``recurrent_cross_transformer``: fairseq's transformer whose encoder-decoder attention sees its
own earlier decisions (Rosendahl et al. 2021, "Recurrent Attention for the Transformer").

Only the decoder layers' encoder-decoder attention changes:
:class:`~ran_fairseq.modules.recurrent_cross_attention.RecurrentCrossAttention` with
``--cross-attention`` (Eqs. 1-10), ``--kv-variant`` (Eqs. 5-8), ``--rescale-lambda`` and
``--rescale-window`` (λ and k of Eqs. 9, 10), in the layers of ``--recurrent-cross-layers``
(0-based, or ``all``; the others use Eq. 1). :class:`RecurrentCrossTransformerConfig` holds every
option and its default (the paper's values). ``--arch recurrent_cross_transformer`` has
transformer-base sizes; ``*_iwslt_de_en`` and ``*_small`` are other sizes. The recurrence runs from
the first target position, so targets must be right-padded (``--left-pad-target`` is refused).
"""
import logging
import math
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from ..modules.recurrent_cross_attention import (
    CROSS_ATTENTION_VARIANTS,
    KV_VARIANTS,
    RecurrentCrossAttention,
)
from ._common import (
    current_options,
    PluginModel,
    TransformerFlags,
    check_transformer_flags,
    require,
    saved_version,
    small_transformer,
)

LAYERS_FLAG = "--recurrent-cross-layers"
# the option of a removed torch.compile path, still in the arguments of older checkpoints
REMOVED_RECURRENCE = "cross_attention_recurrence"

logger = logging.getLogger(__name__)


@dataclass
class RecurrentCrossTransformerConfig(TransformerFlags):
    """``recurrent_cross_transformer``'s options: fairseq's transformer options and these (the
    paper's values as defaults)."""

    cross_attention: Optional[ChoiceEnum(CROSS_ATTENTION_VARIANTS)] = field(
        default="prev-weight", metadata={
            "help": "encoder-decoder attention: dot (Eq. 1), prev-context (Eq. 2), prev-weight "
                    "(Eq. 3), prev-accum-weight (Eq. 4), expand-kv (Eqs. 5-8), continuous "
                    "(Eq. 9) or coverage (Eq. 10)"})
    kv_variant: Optional[int] = field(default=1, metadata={
        "help": "expand-kv: extra key/value from the layer's full previous context (all heads "
                "concatenated, then the output projection, §3.1) with the shared W_k/W_v (1), "
                "with separate matrices (2), from the head's own context with separate "
                "matrices (3), key transformed and value not (4)"})
    rescale_lambda: Optional[float] = field(default=0.5, metadata={
        "help": "λ of continuous (Eq. 9, in (0, 1]) and coverage (Eq. 10, >= 0)"})
    rescale_window: Optional[int] = field(default=5, metadata={
        "help": "continuous: the window j-k..j+k of Eq. 9"})
    recurrent_cross_layers: Optional[str] = field(default="all", metadata={
        "help": "decoder layers (0-based, comma-separated) whose encoder-decoder attention is "
                "--cross-attention, or 'all'; the others use dot"})


def layer_variants(cfg, num_layers):
    """The cross-attention variant of each decoder layer: ``--cross-attention`` in the layers of
    ``--recurrent-cross-layers``, ``dot`` in the others."""
    spec = str(cfg.recurrent_cross_layers).strip()
    if spec == "all":
        chosen = set(range(num_layers))
    else:
        try:
            chosen = {int(part) for part in spec.split(",")}
        except ValueError:
            raise ValueError(f"{LAYERS_FLAG} must be 'all' or comma-separated decoder layer "
                             f"indices (0-based), got {spec!r}") from None
        outside = sorted(i for i in chosen if not 0 <= i < num_layers)
        if outside:
            raise ValueError(f"{LAYERS_FLAG}: layer(s) {outside} do not exist; the decoder has "
                             f"{num_layers} layers, numbered 0..{num_layers - 1}")
    return [cfg.cross_attention if i in chosen else "dot" for i in range(num_layers)]


class RecurrentCrossDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's transformer decoder layer with a :class:`RecurrentCrossAttention` of
    ``cross_attention`` (this layer's variant, see :func:`layer_variants`) as its
    encoder-decoder attention."""

    def __init__(self, cfg, cross_attention, no_encoder_attn=False):
        self._cross_attention = cross_attention  # read by build_encoder_attention in __init__
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)

    def build_encoder_attention(self, embed_dim, cfg):
        return RecurrentCrossAttention(
            embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout,
            cross_attention=self._cross_attention, kv_variant=cfg.kv_variant,
            rescale_lambda=cfg.rescale_lambda, rescale_window=cfg.rescale_window)


class RecurrentCrossTransformerDecoder(TransformerDecoderBase):
    """fairseq's transformer decoder built from :class:`RecurrentCrossDecoderLayer`;
    ``cross_attention_variants`` lists each layer's variant."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False):
        self.cross_attention_variants = tuple(layer_variants(cfg, cfg.decoder.layers))
        self._built = 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = RecurrentCrossDecoderLayer(cfg, self.cross_attention_variants[self._built],
                                           no_encoder_attn)
        self._built += 1
        # Activation checkpointing and FSDP wrapping, as fairseq's own layer builder applies them.
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params = 0 if cfg.checkpoint_activations else cfg.min_params_to_wrap
        return fsdp_wrap(layer, min_num_params=min_params)


@register_model("recurrent_cross_transformer", dataclass=RecurrentCrossTransformerConfig)
class RecurrentCrossTransformerModel(PluginModel, TransformerModel):
    """Transformer with recurrent encoder-decoder attention (Rosendahl et al. 2021); see the
    module docstring for the flags."""

    base_architecture = staticmethod(base_architecture)  # fairseq's transformer-base sizes

    @classmethod
    def upgrade_args(cls, args):
        """A namespace of options version 1 may record the removed --cross-attention-recurrence:
        ``eager`` was the only recurrence left; ``compile`` loads as eager, with a notice."""
        if saved_version(args) < 2 and getattr(args, REMOVED_RECURRENCE, None) == "compile":
            logger.warning("this checkpoint was trained with --cross-attention-recurrence "
                           "compile, which no longer exists: it loads with the eager recurrence "
                           "(the same outputs and gradients)")

    @classmethod
    def check_args(cls, args):
        require(args, "kv_variant", lambda v: v in KV_VARIANTS,
                f"must be one of {', '.join(map(str, KV_VARIANTS))}")
        require(args, "rescale_lambda", math.isfinite, "must be finite")
        require(args, "rescale_window", lambda v: not isinstance(v, bool) and isinstance(v, int)
                and v >= 0, "(k, the window j-k..j+k of Eq. 9) must be an integer >= 0")
        lam = args.rescale_lambda  # its range depends on the variant (Eqs. 9 and 10)
        if args.cross_attention == "continuous" and not 0 < lam <= 1:
            raise ValueError(f"--cross-attention continuous mixes new and previous energies with "
                             f"weights λ and 1-λ: --rescale-lambda must be in (0, 1], got {lam}")
        if args.cross_attention == "coverage" and lam < 0:
            raise ValueError(f"--cross-attention coverage subtracts λ times the attention already "
                             f"paid: --rescale-lambda must be >= 0, got {lam}")
        # expand-kv 1 feeds the decoder-side context through the shared W_k/W_v (Eq. 5)
        if args.cross_attention == "expand-kv" and args.kv_variant == 1 \
                and args.encoder_embed_dim != args.decoder_embed_dim:
            raise ValueError(f"--kv-variant 1 feeds the decoder-side context (size "
                             f"{args.decoder_embed_dim}) through the shared W_k and W_v, which "
                             f"take encoder states (size {args.encoder_embed_dim}): it needs "
                             f"--encoder-embed-dim equal to --decoder-embed-dim; use "
                             f"--kv-variant 2, 3 or 4")
        check_transformer_flags(args)

    @classmethod
    def build_model(cls, cfg, task):
        args = cls.checked_args(cfg)
        # a task option (the namespace of a checkpoint saved before the model had a config
        # dataclass holds it too)
        if getattr(getattr(task, "cfg", None), "left_pad_target", False) \
                or getattr(args, "left_pad_target", False):
            raise ValueError("recurrent_cross_transformer: the cross-attention recurrence runs "
                             "from the first target position, so targets must be right-padded; "
                             "drop --left-pad-target")
        model = super().build_model(args, task)
        model.add_version_buffer()
        return model

    def set_beam_size(self, beam_size):
        """Called by fairseq's beam search (``EnsembleModel.set_decoder_beam_size``): the
        cross-attention then keeps its cached keys and values through reorders that stay within
        each sentence's beam."""
        self.decoder.set_beam_size(beam_size)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return RecurrentCrossTransformerDecoder(cfg, tgt_dict, embed_tokens,
                                                no_encoder_attn=cfg.no_cross_attention)


@register_model_architecture("recurrent_cross_transformer",
                             "recurrent_cross_transformer_iwslt_de_en")
def recurrent_cross_transformer_iwslt_de_en(args):
    current_options(args)
    transformer_iwslt_de_en(args)


@register_model_architecture("recurrent_cross_transformer", "recurrent_cross_transformer_small")
def recurrent_cross_transformer_small(args):
    current_options(args)
    small_transformer(args)
    base_architecture(args)
