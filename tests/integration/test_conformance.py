"""The conformance suite every architecture of the plugin passes (parametrized over tests/systems.py).

Model-level checks drive the model through fairseq's ``EnsembleModel``, the wrapper its beam search
uses, so incremental decoding and beam reordering are exercised exactly as ``fairseq-generate``
exercises them:
  1. step-by-step incremental decoding gives the full teacher-forced forward's log-probabilities;
  2. a sentence's scores do not depend on its batch or on left vs right source padding;
  3. reordering the incremental state as beam search does (within a sentence's beam, with repeats,
     and dropping finished sentences) equals decoding the reordered batch from scratch.
CLI checks run fairseq's own entry points in subprocesses:
  4. training stops, saves, and ``--restore-file`` resumes it;
  5. ``--memory-efficient-fp16`` trains with finite losses;
  6. ``fairseq-generate`` decodes the test set (with ``--print-alignment`` where supported).
"""
import math
import re

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq.sequence_generator import EnsembleModel

import helpers
from systems import SYSTEMS, TINY_RAN, System

# RAN's options for the choices of Zeng et al.'s released code (--ran-initial-init xavier,
# --ran-ffn-dim), with the rest of RAN's variants in tests/systems.py
SYSTEMS = SYSTEMS + [
    System("ran-authors-code", "ran_transformer",
           (*TINY_RAN, "--ran-transition", "ffn", "--ran-decoder-initial", "full",
            "--ran-initial-init", "xavier", "--ran-ffn-dim", "24")),
    System("ran-fixed-xavier", "ran_transformer",
           (*TINY_RAN, "--ran-fixed-initial-matrices", "--ran-initial-init", "xavier"),
           slow_checks=False),
]

TOL = 1e-4
# Tiny randomly initialized models predict nearly uniform distributions, in which even a missing
# state reorder moves log-probabilities by less than TOL. Every check therefore scores at
# temperature 0.1 (logits x 10, fairseq's own ``temperature`` in the incremental path), so that
# state errors show while float32 rounding stays far below TOL.
TEMPERATURE = 0.1
SLOW = [s for s in SYSTEMS if s.slow_checks]


def system_params(systems):
    return [pytest.param(s, id=s.id) for s in systems]


# ---------------------------------------------------------------------------------------------
# Batches and scoring


def make_batch(task, lengths_src, lengths_tgt, left_pad_source=True, seed=0):
    """Random sentences of the given lengths (eos included), collated as fairseq's
    LanguagePairDataset does: sources padded on ``left_pad_source``'s side, targets on the right."""
    g = torch.Generator().manual_seed(seed)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary

    def sentence(d, n):
        body = torch.randint(d.nspecial, len(d), (n - 1,), generator=g)
        return torch.cat([body, torch.tensor([d.eos()])])

    src = [sentence(src_dict, n) for n in lengths_src]
    tgt = [sentence(tgt_dict, n) for n in lengths_tgt]
    return src, tgt


def collate(task, src, tgt, left_pad_source=True, device="cpu"):
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    src_tokens = data_utils.collate_tokens(src, src_dict.pad(), src_dict.eos(), left_pad_source)
    prev = data_utils.collate_tokens(tgt, tgt_dict.pad(), tgt_dict.eos(), False,
                                     move_eos_to_beginning=True)
    target = data_utils.collate_tokens(tgt, tgt_dict.pad(), tgt_dict.eos(), False)
    src_lengths = torch.tensor([len(s) for s in src])
    net_input = {"src_tokens": src_tokens.to(device), "src_lengths": src_lengths.to(device)}
    return net_input, prev.to(device), target.to(device)


@torch.no_grad()
def full_forward_lprobs(model, net_input, prev):
    """Teacher-forced log-probabilities (B, T, V) from one call of the whole model."""
    logits, extra = model(net_input["src_tokens"], net_input["src_lengths"], prev)
    return model.get_normalized_probs((logits / TEMPERATURE, extra), log_probs=True).float()


@torch.no_grad()
def incremental_lprobs(ensemble, net_input, prev, reorder_at=None, order=None):
    """Log-probabilities (B', T, V) from decoding one step at a time, as beam search does. With
    ``reorder_at``/``order``, the encoder output and incremental state are reordered by ``order``
    before step ``reorder_at`` and the remaining steps use ``prev[order]``; rows of the result
    before that step are those of the original batch order."""
    encoder_outs = ensemble.forward_encoder(net_input)
    states = [{} for _ in ensemble.models]
    steps = []
    for t in range(prev.size(1)):
        if t == reorder_at:
            order_t = torch.as_tensor(order, device=prev.device)
            encoder_outs = ensemble.reorder_encoder_out(encoder_outs, order_t)
            ensemble.reorder_incremental_state(states, order_t)
            prev = prev.index_select(0, order_t)
            steps = [s.index_select(0, order_t) for s in steps]
        lp, _ = ensemble.forward_decoder(prev[:, : t + 1], encoder_outs, states, TEMPERATURE)
        steps.append(lp.float())
    return torch.stack(steps, dim=1)


def device_of(model):
    return next(model.parameters()).device


def max_diff_on_targets(a, b, target, pad):
    mask = target.ne(pad).unsqueeze(-1)
    return (a - b).abs().masked_fill(~mask, 0).max().item()


@pytest.fixture(scope="module")
def models(synthetic_databin, device):
    """Per system: (task, left-pad model, right-pad model with the same weights), on ``device``."""
    cache = {}

    def get(system):
        if system.id not in cache:
            task, left = helpers.build_model(system.arch, synthetic_databin, system.flags)
            task_r, right = helpers.build_model(system.arch, synthetic_databin,
                                                (*system.flags, "--left-pad-source"))
            assert task_r.cfg.left_pad_source is False and task.cfg.left_pad_source is True
            right.load_state_dict(left.state_dict())
            cache[system.id] = (task, left.to(device), right.to(device))
        return cache[system.id]

    return get


# Sorted by decreasing source length, as fairseq's LanguagePairDataset collates every batch.
SRC_LENGTHS = [11, 7, 5, 3]
TGT_LENGTHS = [6, 9, 4, 8]


# ---------------------------------------------------------------------------------------------
# 1-3: model-level checks


@pytest.mark.parametrize("left_pad", [True, False], ids=["left-pad", "right-pad"])
@pytest.mark.parametrize("system", system_params(SYSTEMS))
def test_incremental_matches_full_forward(system, models, left_pad):
    task, left, right = models(system)
    check_incremental_matches_full_forward(task, left if left_pad else right, left_pad)


def check_incremental_matches_full_forward(task, model, left_pad=True):
    ensemble = EnsembleModel([model]).eval()
    assert ensemble.has_incremental_states(), "the decoder is not incremental"
    src, tgt = make_batch(task, SRC_LENGTHS, TGT_LENGTHS)
    net_input, prev, target = collate(task, src, tgt, left_pad, device_of(model))
    full = full_forward_lprobs(model, net_input, prev)
    inc = incremental_lprobs(ensemble, net_input, prev)
    assert torch.isfinite(full).all()
    diff = max_diff_on_targets(full, inc, target, task.target_dictionary.pad())
    assert diff <= TOL, f"incremental vs full forward: max abs diff {diff:.2e}"


@pytest.mark.parametrize("system", system_params(SYSTEMS))
def test_scores_independent_of_batch_and_padding_side(system, models):
    check_scores_independent_of_batch_and_padding_side(*models(system))


def check_scores_independent_of_batch_and_padding_side(task, left, right):
    pad = task.target_dictionary.pad()
    src, tgt = make_batch(task, SRC_LENGTHS, TGT_LENGTHS, seed=1)
    batched = {}
    for side, model in (("left", left), ("right", right)):
        net_input, prev, target = collate(task, src, tgt, side == "left", device_of(model))
        batched[side] = full_forward_lprobs(model, net_input, prev)
    _, _, target = collate(task, src, tgt, device=device_of(left))
    d = max_diff_on_targets(batched["left"], batched["right"], target, pad)
    assert d <= TOL, f"left vs right source padding: max abs diff {d:.2e}"
    for i in range(len(src)):
        net_input, prev, tgt_i = collate(task, src[i:i + 1], tgt[i:i + 1], device=device_of(left))
        alone = full_forward_lprobs(left, net_input, prev)[0]
        n = len(tgt[i])
        d = (alone[:n] - batched["left"][i, :n]).abs().max().item()
        assert d <= TOL, f"sentence {i} alone vs in a padded batch: max abs diff {d:.2e}"


# Beam search's reorders: rows are (sentence, hypothesis) pairs, 2 sentences x beam 2; a new order
# picks hypotheses within each sentence's beam (with repeats) or drops finished sentences.
BEAM_ORDERS = {"within-beam": [1, 1, 2, 2], "swap": [1, 0, 3, 2], "shrink": [3, 2]}


@pytest.mark.parametrize("order", BEAM_ORDERS.values(), ids=BEAM_ORDERS.keys())
@pytest.mark.parametrize("system", system_params(SYSTEMS))
def test_reorder_incremental_state(system, models, order):
    task, model, _ = models(system)
    check_reorder_incremental_state(task, model, order)


def check_reorder_incremental_state(task, model, order):
    ensemble = EnsembleModel([model]).eval()
    src, tgt = make_batch(task, [9, 5], [9, 9, 9, 9], seed=2)
    src = [src[0], src[0], src[1], src[1]]  # each sentence's beam shares its source
    net_input, prev, target = collate(task, src, tgt, device=device_of(model))
    reordered = incremental_lprobs(ensemble, net_input, prev, reorder_at=4, order=order)
    # Decoding the reordered batch from scratch equals taking rows ``order`` of the plain decode
    # (batch invariance is checked above), which keeps the batch sorted as fairseq requires.
    plain = incremental_lprobs(ensemble, net_input, prev)[order]
    d = (reordered - plain).abs().max().item()
    assert d <= TOL, f"reordered incremental state vs reordered batch: max abs diff {d:.2e}"


# ---------------------------------------------------------------------------------------------
# 4-6: through fairseq's command-line entry points


LOSS = re.compile(r"\bloss[= ]([-+0-9.eEnaif]+)")
UPDATES = re.compile(r"num_updates[= ](\d+)")


def losses(log):
    return [float(x) for x in LOSS.findall(log)]


@pytest.fixture(scope="module")
def trained(synthetic_databin, tmp_path_factory):
    """Per system: a save dir trained for 3 updates, then resumed to 6 (CLI logs kept)."""
    cache = {}

    def get(system):
        if system.id not in cache:
            save = tmp_path_factory.mktemp(f"ckpt-{system.id}")
            first = helpers.train(synthetic_databin, save, system.arch, system.flags, max_update=3)
            second = helpers.train(synthetic_databin, save, system.arch, system.flags, max_update=6)
            cache[system.id] = (save, first.stdout + first.stderr, second.stdout + second.stderr)
        return cache[system.id]

    return get


@pytest.mark.parametrize("system", system_params(SLOW))
def test_resume_from_checkpoint(system, trained):
    save, first, second = trained(system)
    assert "num_updates 3" in first or "num_updates=3" in first
    assert re.search(r"[Ll]oaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 3 updates\)", second), \
        "the second run did not restore checkpoint_last.pt at 3 updates"
    updates = [int(u) for u in UPDATES.findall(second)]
    assert updates and min(updates) == 4 and max(updates) == 6, f"resumed run's updates: {updates}"
    import ran_fairseq  # noqa: F401  (its safe-loading allow-list, as in fairseq's CLIs)

    state = checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 6
    assert all(math.isfinite(x) for x in losses(second))


@pytest.mark.parametrize("system", system_params(SLOW))
def test_memory_efficient_fp16_trains(system, synthetic_databin, tmp_path):
    check_trains_finite(system, synthetic_databin, tmp_path, "--memory-efficient-fp16", "fp16")


def check_trains_finite(system, data, save, flag, what):
    """Four updates with ``flag`` log finite losses and reach update 4."""
    proc = helpers.train(data, save, system.arch, (*system.flags, flag, "--no-save"),
                         max_update=4)
    log = proc.stdout + proc.stderr
    values = losses(log)
    assert values, "no loss was logged"
    assert all(math.isfinite(x) for x in values), f"non-finite {what} losses: {values}"
    assert "num_updates 4" in log or "num_updates=4" in log


# fairseq 0.12 takes --bf16 for a TPU's flag (ran_fairseq.compat.bf16_without_tpu): one system
# per architecture, those with hand-written backward passes first, trains in bfloat16 on the CPU
# (scripts/gpu-check.sh trains every one of them on a GPU).
BF16 = [s for s in SLOW if s.id in ("ran-all", "rct-prev-accum-weight", "rct-expand-kv3",
                                    "pa-max-attn", "dynmem-k5")]


@pytest.mark.parametrize("system", system_params(BF16))
def test_bf16_trains(system, synthetic_databin, tmp_path):
    check_trains_finite(system, synthetic_databin, tmp_path, "--bf16", "bf16")


@pytest.mark.parametrize("system", system_params(SLOW))
def test_generate_end_to_end(system, trained, synthetic_databin):
    save, _, _ = trained(system)
    extra = ["--print-alignment"] if system.alignment else []
    out = helpers.generate(synthetic_databin, save / "checkpoint_last.pt", extra).stdout
    hyps = re.findall(r"^H-(\d+)\t(\S+)\t", out, re.M)
    n_test = len((synthetic_databin.parent / "raw" / "test.de").read_text().splitlines())
    assert len(re.findall(r"^S-\d+\t", out, re.M)) == n_test
    assert len({i for i, _ in hyps}) == n_test
    assert all(math.isfinite(float(score)) for _, score in hyps)
    assert re.search(r"Generate test with beam=3: BLEU4? = ", out)
    if system.alignment:
        assert len(re.findall(r"^A-\d+\t", out, re.M)) == len(hyps)
