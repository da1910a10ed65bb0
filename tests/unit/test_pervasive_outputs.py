"""Pervasive Attention's outputs do not move when its code is made faster: logits and the
gradients of every parameter, on fixed weights and batches, in training mode (batch-norm training
statistics, dropout from a fixed seed) and in evaluation mode, with and without padding, equal
those of the implementation recorded in ``tests/data/pervasive_outputs.pt`` to 1e-5 of each
tensor's scale (its largest magnitude, at least 1): float32 sums taken in another order move a
gradient of magnitude 10 by about 1e-6 of it.

The recording was made before the DenseNet's training step was fused and its masking skipped for
batches without padding. Regenerate it only for a change that is meant to change the outputs:
``PYTHONPATH=. python tests/unit/test_pervasive_outputs.py`` (it says which commit it recorded)."""
import subprocess
import types
from pathlib import Path

import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary

from ran_fairseq.models.pervasive_attention import PervasiveAttentionModel
from ran_fairseq.modules import _torch_ops

RECORDING = Path(__file__).resolve().parents[1] / "data" / "pervasive_outputs.pt"
VOCAB = 12
CASES = {
    # name: flags beyond the size (L = 3, g = 4, d_s = 6, d_t = 5)
    "max k3": ["--kernel-size", "3", "--aggregator", "max"],
    "max k5 tied": ["--kernel-size", "5", "--aggregator", "max",
                    "--share-decoder-input-output-embed"],
    "max-attn k3 gated": ["--kernel-size", "3", "--aggregator", "max-attn",
                          "--gated-convolutions", "masked"],
    "avg k3 gated both": ["--kernel-size", "3", "--aggregator", "avg",
                          "--gated-convolutions", "both"],
    "attn k3 memory-efficient": ["--kernel-size", "3", "--aggregator", "attn",
                                 "--memory-efficient-densenet"],
}
SIZE = ["--num-layers", "3", "--growth-rate", "4", "--encoder-embed-dim", "6",
        "--decoder-embed-dim", "5", "--max-source-positions", "50", "--max-target-positions", "50"]


class _Task:
    def __init__(self):
        self.source_dictionary, self.target_dictionary = Dictionary(), Dictionary()
        for i in range(VOCAB - 4):
            self.source_dictionary.add_symbol(f"s{i}")
            self.target_dictionary.add_symbol(f"t{i}")


def build(flags, dtype=torch.float32):
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        ["unused-data", "--arch", "pervasive_attention", "--task", "translation", *SIZE, *flags])
    torch.manual_seed(0)
    model = PervasiveAttentionModel.build_model(args, _Task()).to(dtype)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # batch norms away from their initial identity
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5, generator=g)
                module.bias.uniform_(-0.5, 0.5, generator=g)
                module.running_mean.uniform_(-0.5, 0.5, generator=g)
                module.running_var.uniform_(0.5, 1.5, generator=g)
    return model


def batch(padded):
    """Four sentence pairs, 7 source and 6 target tokens; with ``padded``, right-padded sources and
    targets of several lengths (pad = 1, eos = 2)."""
    g = torch.Generator().manual_seed(2)
    src = torch.randint(4, VOCAB, (4, 7), generator=g)
    prev = torch.randint(4, VOCAB, (4, 6), generator=g)
    prev[:, 0] = 2
    if padded:
        for b, (s, t) in enumerate([(7, 6), (5, 4), (3, 6), (6, 2)]):
            src[b, s:] = 1
            prev[b, t:] = 1
    src_lengths = src.ne(1).sum(1)
    return src, src_lengths, prev


def outputs(flags, padded, training, dtype):
    """Logits (training or evaluation mode) and, in training mode, every parameter's gradient of
    the summed logits weighted by fixed random numbers."""
    model = build(flags, dtype)
    model.train(training)
    src, src_lengths, prev = batch(padded)
    torch.manual_seed(3)
    logits, _ = model(src, src_lengths, prev)
    result = {"logits": logits.detach()}
    if training:
        g = torch.Generator().manual_seed(4)
        weights = torch.randn(logits.shape, generator=g, dtype=logits.dtype)
        keep = prev.ne(1).unsqueeze(-1).to(logits.dtype)
        (logits * weights * keep).sum().backward()
        for name, p in model.named_parameters():
            if p.grad is not None:
                result[f"grad {name}"] = p.grad.detach()
        for name, b in model.named_buffers():
            if "running" in name:
                result[f"buffer {name}"] = b.detach()
    return result


def keys():
    """(case, padded, training, dtype): every case in float32, the first also in float64."""
    return [(name, padded, training, dtype) for name in CASES for padded in (False, True)
            for training in (True, False)
            for dtype in ((torch.float32, torch.float64) if name == "max k3" else
                          (torch.float32,))]


def case_id(key):
    name, padded, training, dtype = key
    return (f"{name}-{'padded' if padded else 'unpadded'}-{'train' if training else 'eval'}-"
            f"{str(dtype).replace('torch.', '')}")


@pytest.fixture(scope="module")
def recording():
    return torch.load(RECORDING, weights_only=True)


@pytest.mark.parametrize("key", keys(), ids=case_id)
def test_pervasive_outputs_equal_the_recorded_ones(recording, key):
    name, padded, training, dtype = key
    expected = recording["cases"][case_id(key)]
    got = outputs(CASES[name], padded, training, dtype)
    assert got.keys() == expected.keys()
    for k, value in expected.items():
        scale = max(1.0, value.abs().max().item())
        difference = (got[k] - value).abs().max().item()
        assert difference <= 1e-5 * scale, f"{k}: differs by {difference:.2e} (scale {scale:.2f})"


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_pervasive_outputs_are_the_recorded_ones_with_the_public_backward(recording, padded,
                                                                         monkeypatch):
    """The fused batch norm's backward without aten's internal operators (their public forms,
    ran_fairseq/modules/_torch_ops.py, as where a torch lacks them or they disagree) gives the
    recorded gradients too; the lookup finds both operators missing in an empty namespace."""
    assert _torch_ops.fused_batch_norm_backward_available()  # this torch has them
    assert _torch_ops._lookup_batch_norm_ops(aten=types.SimpleNamespace()) == (None, None)
    monkeypatch.setattr(_torch_ops, "_THRESHOLD_BACKWARD", None)
    monkeypatch.setattr(_torch_ops, "_BATCH_NORM_BACKWARD", None)
    assert not _torch_ops.fused_batch_norm_backward_available()
    key = ("max k3", padded, True, torch.float32)
    expected = recording["cases"][case_id(key)]
    got = outputs(CASES["max k3"], padded, True, torch.float32)
    for k, value in expected.items():
        scale = max(1.0, value.abs().max().item())
        difference = (got[k] - value).abs().max().item()
        assert difference <= 1e-5 * scale, f"{k}: differs by {difference:.2e} (scale {scale:.2f})"


def test_pervasive_padded_logits_of_real_rows_equal_each_sentence_alone():
    """The recording itself is of a correct model: a padded batch's real positions score as each
    sentence alone, in training (no dropout) and evaluation mode (one sentence at a time here,
    so training-mode statistics are checked by the conformance suite, not here)."""
    model = build(CASES["max k3"], torch.float64)
    model.eval()
    src, src_lengths, prev = batch(True)
    logits, _ = model(src, src_lengths, prev)
    for b in range(src.size(0)):
        s, t = int(src_lengths[b]), int(prev[b].ne(1).sum())
        alone, _ = model(src[b:b + 1, :s], src_lengths[b:b + 1], prev[b:b + 1, :t])
        torch.testing.assert_close(logits[b, :t], alone[0], rtol=1e-9, atol=1e-9)


def write():
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    cases = {case_id(k): outputs(CASES[k[0]], *k[1:]) for k in keys()}
    torch.save({"commit": commit, "cases": cases}, RECORDING)
    print(f"wrote {RECORDING} ({len(cases)} cases) from the code of commit {commit}")


if __name__ == "__main__":
    write()
