"""Trained checkpoints and teacher-forced batches for the analyses.

``load_checkpoint(path, data)`` returns fairseq's ``(task, model)`` for a checkpoint written by
``fairseq-train`` (any architecture; the plugin is imported first so that its models and its safe
checkpoint loading are registered), the model in eval mode on the CPU. ``teacher_forced_samples``
collates the first sentences of a data-bin subset into fairseq batches (``net_input`` with
``src_tokens`` (B, S), ``src_lengths`` (B,), ``prev_output_tokens`` (B, T); ``target`` (B, T)),
leaving out sentences longer than the model accepts.
"""
import logging
import os

import numpy as np
import torch

import ran_fairseq  # noqa: F401  (registers the plugin's models before a checkpoint is built)
from fairseq import checkpoint_utils, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from ran_fairseq.modules.attention_entropy import AttentionEntropyRecorder

logger = logging.getLogger(__name__)


def labelled(spec):
    """``"LABEL=PATH"`` -> ``(LABEL, PATH)``; a bare path is labelled by its folder when the file
    is fairseq's ``checkpoint*.pt``, else by its file name."""
    label, sep, path = spec.partition("=")
    if sep and label:
        return label, path
    base = os.path.basename(spec)
    if base.startswith("checkpoint"):
        return os.path.basename(os.path.dirname(os.path.abspath(spec))), spec
    return os.path.splitext(base)[0], spec


def load_checkpoint(path, data=None):
    """``(task, model)`` of the checkpoint at ``path``; ``data`` replaces the data-bin recorded in
    the checkpoint (needed when training ran elsewhere)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path} (--checkpoint)")
    overrides = {"data": data} if data else None
    state = checkpoint_utils.load_checkpoint_to_cpu(path, overrides)
    cfg = state.get("cfg")
    if cfg is None:
        cfg = convert_namespace_to_omegaconf(state["args"])
    data_dir = utils.split_paths(cfg.task.data)[0]
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"the data-bin {data_dir} of checkpoint {path} does not exist; "
                                "pass the data-bin with --data")
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], overrides, state=state)
    return task, models[0].eval()


def require_attention(model, what):
    """Raise if ``model`` has no attention module the entropy recorder can read."""
    if next(AttentionEntropyRecorder(model).modules(), None) is None:
        raise ValueError(f"{what} has no attention modules to analyse: the analyses read fairseq's "
                         "MultiheadAttention and modules with records_attention = True inside "
                         "encoder/decoder layers (e.g. ran_transformer, transformer)")


def teacher_forced_samples(task, model, subset="valid", max_sentences=None, batch_size=32):
    """Batches of the first ``max_sentences`` sentences of ``subset`` (all if None) in corpus
    order, as fairseq samples; sentences longer than the model's or task's limits are skipped."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be positive, got {batch_size}")
    try:
        task.load_dataset(subset)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e} (--subset {subset})") from None
    dataset = task.dataset(subset)
    count = len(dataset) if max_sentences is None else min(max_sentences, len(dataset))
    limits = utils.resolve_max_positions(task.max_positions(), model.max_positions())
    indices, skipped = dataset.filter_indices_by_size(np.arange(count), limits)
    if len(skipped):
        logger.warning("skipped %d of %d %s sentences longer than the model's limits %s",
                       len(skipped), count, subset, limits)
    if len(indices) == 0:
        raise ValueError(f"no {subset} sentence to analyse (--subset, --max-sentences)")
    return [dataset.collater([dataset[int(i)] for i in indices[start:start + batch_size]])
            for start in range(0, len(indices), batch_size)]


@torch.no_grad()
def recorded_forwards(model, samples, pad, keep_weights=False):
    """For each sample, a teacher-forced forward pass of ``model`` inside an
    :class:`AttentionEntropyRecorder` (real target positions: tokens other than ``pad``); yields
    the recorder after each pass."""
    for sample in samples:
        with AttentionEntropyRecorder(model, sample["target"].ne(pad), keep_weights) as recorder:
            model(**sample["net_input"])
        yield recorder
