"""``rnnsearch_dynmem``: RNNSearch with dynamic-memory (recurrent) attention (Yang et al. 2017,
"Neural Machine Translation with Recurrent Attention Modeling").

Encoder: a bidirectional LSTM, annotations h_i = [→h_i; ←h_i] (Eqs. 1-2), returned in the
caller's padding layout. Decoder: an LSTM with input feeding, s_j = LSTM(s_{j-1}, [W_T y_{j-1};
c_{j-1}]) (Eq. 4), the attention of
:class:`~ran_fairseq.modules.dynamic_memory_attention.DynamicMemoryAttention` (Eqs. 5-7, or
Eq. 11 with the memory), s̃_j = tanh(W_1 [s_j; c_j] + b_1), p_j = softmax(W_2 s̃_j) (Eqs. 8-9).
docs/rnnsearch_dynmem.md gives the flags, the named sizes and the choices where the paper is
silent.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import (
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.models.lstm import Embedding, LSTMCell, LSTMEncoder, Linear
from fairseq.modules import FairseqDropout

from ..modules.dynamic_memory_attention import AttentionRows, DynamicMemoryAttention
from ._common import (
    PluginConfig,
    PluginModel,
    current_options,
    fill,
    positive,
    probability,
    require,
)

UNLIMITED_POSITIONS = 100000  # an RNN has no position limit (fairseq's lstm default bound)


class RNNSearchEncoder(LSTMEncoder):
    """fairseq's bidirectional LSTM encoder with its output in the caller's padding layout.

    ``forward`` returns a dict: ``encoder_out`` (B, S, 2H) annotations, zero at padding, in the
    column layout of ``src_tokens`` (left- or right-padded alike); ``encoder_padding_mask`` (B, S),
    True at padding; ``final_hiddens`` / ``final_cells`` (layers, B, 2H), [→h_S; ←h_1] per layer.
    Batches need not be sorted by length; ``src_lengths`` is not needed (the padding gives them).
    """

    def __init__(self, dictionary, embed_tokens, hidden_size, num_layers, dropout):
        # fairseq's LSTMEncoder's names: --encoder-hidden-size, --encoder-layers, --dropout
        super().__init__(dictionary, embed_dim=embed_tokens.embedding_dim, hidden_size=hidden_size,
                         num_layers=num_layers, dropout_in=dropout, dropout_out=dropout,
                         bidirectional=True, pretrained_embed=embed_tokens,
                         max_source_positions=UNLIMITED_POSITIONS)

    def forward(self, src_tokens, src_lengths=None):
        padding_mask = src_tokens.eq(self.padding_idx)
        bsz, srclen = src_tokens.shape
        lengths = (~padding_mask).long().sum(1)
        if bool((lengths == 0).any()):
            raise ValueError("a source sentence has no tokens (only padding); fairseq's datasets "
                             "always end a sentence with </s>")
        # Real tokens are contiguous; move them to the front (what LSTM packing needs), encode,
        # and move the annotations back to the columns of their tokens.
        first = (~padding_mask).long().argmax(1, keepdim=True)  # leading padding per sentence
        columns = torch.arange(srclen, device=src_tokens.device).unsqueeze(0)
        aligned = src_tokens.gather(1, (columns + first) % srclen)
        longest = int(lengths.max())
        x, final_hiddens, final_cells, _ = super().forward(aligned[:, :longest], lengths,
                                                           enforce_sorted=False)
        x = F.pad(x.transpose(0, 1), (0, 0, 0, srclen - longest))  # (B, S, 2H), real ones first
        index = ((columns - first) % srclen).unsqueeze(-1).expand(-1, -1, x.size(-1))
        x = x.gather(1, index).masked_fill(padding_mask.unsqueeze(-1), 0.0)
        return {"encoder_out": x, "encoder_padding_mask": padding_mask,
                "final_hiddens": final_hiddens, "final_cells": final_cells}

    def reorder_encoder_out(self, encoder_out, new_order):
        batch_dim = {"final_hiddens": 1, "final_cells": 1}  # the others are batch-first
        return {name: value.index_select(batch_dim.get(name, 0), new_order)
                for name, value in encoder_out.items()}


class RNNSearchDecoder(FairseqIncrementalDecoder):
    """LSTM decoder with input feeding and (dynamic-memory) additive attention, Eqs. 4-9 / 11-13.

    Returns ``(logits (B, T, V), attention (B, T, S))``; the attention (in the encoder's column
    layout, so ``--print-alignment`` indexes ``src_tokens``) is None in training or when fairseq
    asks for no attention. Incremental state: the LSTM states and input feed under this decoder's
    key, the projected keys, previous attention and memory under the attention module's key.
    """

    def __init__(self, dictionary, embed_tokens, context_dim, hidden_size, out_embed_dim,
                 num_layers, attention, dropout, share_input_output_embed):
        # fairseq's LSTMDecoder's names: --decoder-hidden-size, --decoder-out-embed-dim,
        # --decoder-layers, --dropout, --share-decoder-input-output-embed
        super().__init__(dictionary)
        embed_dim = embed_tokens.embedding_dim
        self.embed_tokens = embed_tokens
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.init_proj = Linear(context_dim, hidden_size)  # s_0 = tanh(W_s [→h_S; ←h_1] + b_s)
        self.layers = nn.ModuleList(
            [LSTMCell(embed_dim + context_dim if layer == 0 else hidden_size, hidden_size)
             for layer in range(num_layers)])
        self.attention = attention
        self.attention_rows = AttentionRows()
        self.readout = Linear(hidden_size + context_dim, out_embed_dim)  # W_1, b_1 (Eq. 8)
        self.share_input_output_embed = share_input_output_embed
        self.output_projection = (None if share_input_output_embed
                                  else Linear(out_embed_dim, len(dictionary), bias=False))  # W_2
        self.need_attn = True

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        x, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(x), attn

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         **kwargs):
        if encoder_out is None:
            raise ValueError("rnnsearch_dynmem's decoder needs the encoder output")
        keys = encoder_out["encoder_out"]
        padding_mask = encoder_out["encoder_padding_mask"]
        cached = self.get_incremental_state(incremental_state, "decoder_state")
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        bsz, tgtlen = prev_output_tokens.shape
        x = self.dropout_module(self.embed_tokens(prev_output_tokens))  # W_T y_{j-1}
        if cached is None:
            s0 = torch.tanh(self.init_proj(encoder_out["final_hiddens"][-1]))
            hiddens = [s0] * self.num_layers
            cells = [torch.zeros_like(s0)] * self.num_layers
            input_feed = keys.new_zeros(bsz, keys.size(2))
        else:
            hiddens = list(cached["hiddens"].unbind(0))
            cells = list(cached["cells"].unbind(0))
            input_feed = cached["input_feed"]
        attn_state = self.attention.start(keys, padding_mask, incremental_state)

        states, contexts, rows = [], [], []
        for j in range(tgtlen):
            inp = torch.cat([x[:, j], input_feed], dim=1)  # Eq. 4: [W_T y_{j-1}; c_{j-1}]
            for layer, cell in enumerate(self.layers):
                hiddens[layer], cells[layer] = cell(inp, (hiddens[layer], cells[layer]))
                inp = self.dropout_module(hiddens[layer])
            context, attn, attn_state = self.attention.step(hiddens[-1], keys, padding_mask,
                                                            attn_state)
            input_feed = context
            states.append(hiddens[-1])
            contexts.append(context)
            rows.append(attn)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "decoder_state", {
                "hiddens": torch.stack(hiddens), "cells": torch.stack(cells),
                "input_feed": input_feed})
            self.attention.save(incremental_state, attn_state)

        features = torch.cat([torch.stack(states, 1), torch.stack(contexts, 1)], dim=-1)
        out = self.dropout_module(torch.tanh(self.readout(features)))  # s̃_j, Eq. 8
        attn, _ = self.attention_rows(torch.stack(rows, 1))
        return out, (attn if not self.training and self.need_attn else None)

    def output_layer(self, features):
        """W_2 s̃_j (Eq. 9): logits (B, T, V)."""
        if self.output_projection is None:
            return F.linear(features, self.embed_tokens.weight)
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order):
        cached = self.get_incremental_state(incremental_state, "decoder_state")
        if cached is None:
            return
        self.set_incremental_state(incremental_state, "decoder_state", {
            "hiddens": cached["hiddens"].index_select(1, new_order),
            "cells": cached["cells"].index_select(1, new_order),
            "input_feed": cached["input_feed"].index_select(0, new_order)})

    def max_positions(self):
        return UNLIMITED_POSITIONS

    def make_generation_fast_(self, need_attn=False, **kwargs):
        self.need_attn = need_attn


def _option(default, help):
    return field(default=default, metadata={"help": help})


SET_BY_ARCH = "; set by --arch"


@dataclass
class RNNSearchDynamicMemoryConfig(PluginConfig):
    """``rnnsearch_dynmem``'s options; the sizes that are None are the named architecture's."""

    dropout: Optional[float] = _option(0.2, "dropout on embeddings, encoder outputs, between LSTM layers "
                                  "and on the attentional output s̃")
    encoder_embed_dim: Optional[int] = _option(None, "source embedding size" + SET_BY_ARCH)
    encoder_hidden_size: Optional[int] = _option(
        None, "encoder LSTM size per direction (annotations are twice this)" + SET_BY_ARCH)
    encoder_layers: Optional[int] = _option(1, "bidirectional encoder LSTM layers")
    decoder_embed_dim: Optional[int] = _option(None, "target embedding size" + SET_BY_ARCH)
    decoder_hidden_size: Optional[int] = _option(None, "decoder LSTM size" + SET_BY_ARCH)
    decoder_layers: Optional[int] = _option(1, "decoder LSTM layers")
    decoder_out_embed_dim: Optional[int] = _option(
        None, "size of the attentional output s̃_j (Eq. 8)" + SET_BY_ARCH)
    attention_dim: Optional[int] = _option(
        None, "size of the additive attention's hidden layer (v_a); default --decoder-hidden-size")
    dynamic_memory_window: Optional[int] = _option(
        5, "half-width k of the previous-attention window fed to each source word's memory "
           "(2k+1 values; paper: 0 and 5)")
    dynamic_memory_dim: Optional[int] = _option(
        None, "size of each source word's memory LSTM (paper: 500)" + SET_BY_ARCH)
    no_dynamic_memory: Optional[bool] = _option(False, "plain RNNSearch attention (Eq. 5) without the "
                                             "memory")
    init_range: Optional[float] = _option(0.1, "every parameter starts uniform in [-R, R] (paper: 0.1)")
    share_decoder_input_output_embed: Optional[bool] = _option(
        False, "tie W_2 to the target embeddings (needs --decoder-out-embed-dim = "
               "--decoder-embed-dim)")
    share_all_embeddings: Optional[bool] = _option(
        False, "one embedding matrix for source, target and W_2 (needs a joined dictionary and "
               "equal embedding sizes)")


def rnnsearch_dynmem(args):
    """The paper's sizes (``--arch rnnsearch_dynmem``): embeddings and LSTMs 1000, memory 500."""
    current_options(args)
    fill(args, encoder_embed_dim=1000, encoder_hidden_size=1000, decoder_embed_dim=1000,
         decoder_hidden_size=1000, decoder_out_embed_dim=1000, dynamic_memory_dim=500)
    fill(args, attention_dim=args.decoder_hidden_size)


@register_model("rnnsearch_dynmem", dataclass=RNNSearchDynamicMemoryConfig)
class RNNSearchDynamicMemoryModel(PluginModel, FairseqEncoderDecoderModel):
    """RNNSearch with the dynamic-memory attention of Yang et al. 2017 (see the module docstring);
    ``--no-dynamic-memory`` gives plain RNNSearch."""

    base_architecture = staticmethod(rnnsearch_dynmem)

    @classmethod
    def check_args(cls, args):
        probability(args, "dropout")
        positive(args, "encoder_embed_dim", "encoder_hidden_size", "encoder_layers",
                 "decoder_embed_dim", "decoder_hidden_size", "decoder_layers",
                 "decoder_out_embed_dim", "attention_dim")
        require(args, "dynamic_memory_window", lambda v: v >= 0, "must be >= 0")
        require(args, "init_range", lambda v: v > 0, "must be positive")
        if not args.no_dynamic_memory and args.dynamic_memory_dim < 1:
            raise ValueError(f"--dynamic-memory-dim must be positive, got "
                             f"{args.dynamic_memory_dim} (--no-dynamic-memory turns the memory "
                             f"off)")
        if args.share_all_embeddings and args.encoder_embed_dim != args.decoder_embed_dim:
            raise ValueError("--share-all-embeddings needs --encoder-embed-dim = "
                             "--decoder-embed-dim")
        if (args.share_decoder_input_output_embed or args.share_all_embeddings) \
                and args.decoder_out_embed_dim != args.decoder_embed_dim:
            raise ValueError("--share-decoder-input-output-embed (and --share-all-embeddings) "
                             "need --decoder-out-embed-dim = --decoder-embed-dim")

    @classmethod
    def build_model(cls, cfg, task):
        args = cls.checked_args(cfg)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed = Embedding(len(src_dict), args.encoder_embed_dim, src_dict.pad())
        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings needs a joined dictionary "
                                 "(fairseq-preprocess --joined-dictionary)")
            decoder_embed = encoder_embed
            args.share_decoder_input_output_embed = True
        else:
            decoder_embed = Embedding(len(tgt_dict), args.decoder_embed_dim, tgt_dict.pad())
        encoder = RNNSearchEncoder(src_dict, encoder_embed, args.encoder_hidden_size,
                                   args.encoder_layers, args.dropout)
        attention = DynamicMemoryAttention(
            args.decoder_hidden_size, encoder.output_units, args.attention_dim,
            dynamic_memory_window=args.dynamic_memory_window,
            dynamic_memory_dim=0 if args.no_dynamic_memory else args.dynamic_memory_dim)
        decoder = RNNSearchDecoder(tgt_dict, decoder_embed, encoder.output_units,
                                   args.decoder_hidden_size, args.decoder_out_embed_dim,
                                   args.decoder_layers, attention, args.dropout,
                                   args.share_decoder_input_output_embed)
        model = cls(encoder, decoder)
        model.init_uniform_(args.init_range)
        model.add_version_buffer()
        return model

    def init_uniform_(self, init_range):
        """Every parameter uniform in [-init_range, init_range] (paper: 0.1), padding embeddings
        zero."""
        if init_range <= 0:
            raise ValueError(f"--init-range must be positive, got {init_range}")
        with torch.no_grad():
            for param in self.parameters():
                param.uniform_(-init_range, init_range)
            for embed in (self.encoder.embed_tokens, self.decoder.embed_tokens):
                embed.weight[embed.padding_idx].zero_()


@register_model_architecture("rnnsearch_dynmem", "rnnsearch_dynmem_small")
def rnnsearch_dynmem_small(args):
    """A CPU size: embeddings and LSTMs 256, memory 128."""
    current_options(args)
    fill(args, encoder_embed_dim=256, encoder_hidden_size=256, decoder_embed_dim=256,
         decoder_hidden_size=256, decoder_out_embed_dim=256, dynamic_memory_dim=128)
    rnnsearch_dynmem(args)
