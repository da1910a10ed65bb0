"""Attention entropy (Zeng et al. 2021, Eq. 5): the recorder and the criterion that logs it."""
import math
import socket
import subprocess
import sys

import pytest
import torch
from fairseq.data import data_utils

import helpers
from ran_fairseq.modules.attention_entropy import AttentionEntropyRecorder, attention_kind, entropy_sum
from systems import SYSTEMS, TINY_TRANSFORMER


def test_entropy_of_known_rows():
    uniform = torch.full((2, 1, 3, 4), 0.25)  # heads, B, T, S
    total, count = entropy_sum(uniform)
    assert count == 6 and total.item() == pytest.approx(6 * math.log(4))
    one_hot = torch.zeros(1, 1, 2, 5)
    one_hot[..., 0] = 1
    assert entropy_sum(one_hot)[0].item() == pytest.approx(0.0)
    mask = torch.tensor([[True, False, True]])
    total, count = entropy_sum(uniform, mask)
    assert count == 4 and total.item() == pytest.approx(4 * math.log(4))


def test_attention_kind_names():
    assert attention_kind("encoder.layers.3.self_attn") == ("enc", 3)
    assert attention_kind("decoder.layers.0.self_attn") == ("dec", 0)
    assert attention_kind("decoder.layers.5.encoder_attn") == ("crs", 5)
    assert attention_kind("decoder.output_projection") is None


def test_attention_kind_from_module_attribute():
    rnn_attention = torch.nn.Module()
    rnn_attention.attention_side = "crs"
    assert attention_kind("decoder.attention", rnn_attention) == ("crs", 0)
    assert attention_kind("decoder.layers.2.attention", rnn_attention) == ("crs", 2)
    rnn_attention.attention_side = "cross"
    with pytest.raises(ValueError, match="attention_side"):
        attention_kind("decoder.attention", rnn_attention)


def batch(task, sentences, targets, left_pad=True):
    d = task.source_dictionary
    src = data_utils.collate_tokens(sentences, d.pad(), d.eos(), left_pad)
    prev = data_utils.collate_tokens(targets, d.pad(), d.eos(), False, move_eos_to_beginning=True)
    tgt = data_utils.collate_tokens(targets, d.pad(), d.eos(), False)
    return src, torch.tensor([len(s) for s in sentences]), prev, tgt.ne(d.pad())


@pytest.mark.parametrize("system", [s for s in SYSTEMS if s.id in ("transformer", "ran-all", "ran-hc-sa")],
                         ids=lambda s: s.id)
@torch.no_grad()
def test_recorder_masks_padding_and_leaves_outputs_unchanged(synthetic_databin, system):
    task, model = helpers.build_model(system.arch, synthetic_databin, system.flags)
    g = torch.Generator().manual_seed(0)

    def sent(n):
        return torch.cat([torch.randint(4, len(task.source_dictionary), (n - 1,), generator=g),
                          torch.tensor([2])])

    long_src, short_src, long_tgt, short_tgt = sent(9), sent(4), sent(7), sent(3)
    per_sentence = []
    for s, t in ((long_src, long_tgt), (short_src, short_tgt)):
        src, lengths, prev, mask = batch(task, [s], [t])
        with AttentionEntropyRecorder(model, mask) as rec:
            model(src, lengths, prev)
        per_sentence.append(rec)
    src, lengths, prev, mask = batch(task, [long_src, short_src], [long_tgt, short_tgt])
    plain = model(src, lengths, prev)[0]
    with AttentionEntropyRecorder(model, mask) as rec:
        recorded = model(src, lengths, prev)[0]
    assert torch.allclose(plain, recorded, atol=1e-6)
    assert set(rec.sums) == {(side, i) for side in ("enc", "dec", "crs") for i in range(2)}
    for key in rec.sums:
        assert rec.counts[key] == sum(r.counts[key] for r in per_sentence)
        assert rec.sums[key] == pytest.approx(sum(r.sums[key] for r in per_sentence), rel=1e-4)
        mean = rec.sums[key] / rec.counts[key]
        assert 0 < mean <= math.log(9) + 1e-6
    assert all(not m._forward_hooks and not m.skip_embed_dim_check for m in model.modules()
               if hasattr(m, "skip_embed_dim_check"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_criterion_logs_entropy_in_distributed_validation(synthetic_databin, tmp_path):
    """Two CPU ranks (gloo): the criterion's logging outputs are summed across workers."""
    port = free_port()
    base = helpers.train_args(synthetic_databin, tmp_path, "transformer", TINY_TRANSFORMER, max_update=2)
    base[base.index("--criterion") + 1] = "label_smoothed_cross_entropy_with_entropy"
    base.remove("--disable-validation")
    base += ["--no-save", "--distributed-world-size", "2", "--distributed-backend", "gloo",
             "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-no-spawn",
             "--ddp-backend", "legacy_ddp"]
    procs = [subprocess.Popen([sys.executable, "-m", "fairseq_cli.train", *map(str, base),
                               "--distributed-rank", str(rank)], env=helpers.fairseq_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    valid = [line for line in logs[0].splitlines() if "valid on 'valid' subset" in line]
    assert valid, logs[0][-3000:]
    for name in ("ent_enc0", "ent_enc1", "ent_dec0", "ent_crs1"):
        value = float(valid[-1].split(f"| {name} ")[1].split()[0])
        assert 0 < value < math.log(100)
