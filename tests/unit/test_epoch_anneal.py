"""The ``epoch_anneal`` learning-rate scheduler (ran_fairseq/lr_scheduler/epoch_anneal.py): Yang et al.
(2017) section 3.2's schedules, built through fairseq's own parser and registry, agreement with
fairseq's ``fixed --force-anneal`` where both apply, and errors on bad flags."""
import pytest

import helpers


def build_scheduler(data_bin, flags):
    """The optimizer and lr scheduler fairseq-train builds for ``flags`` (SGD on one weight)."""
    import torch
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim import lr_scheduler

    args = helpers.parse_args("rnnsearch_dynmem_small", data_bin,
                              ["--optimizer", "sgd", "--lr", "0.7", *flags])
    cfg = convert_namespace_to_omegaconf(args)
    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    return optimizer, lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, optimizer)


def epoch_rates(scheduler, epochs, updates_per_epoch=3):
    """The rate of every epoch as fairseq's trainer sets it: at the start of the epoch, then kept
    through its updates."""
    rates, n = [], 0
    for epoch in range(1, epochs + 1):
        scheduler.step_begin_epoch(epoch)
        for _ in range(updates_per_epoch):
            n += 1
            rate = scheduler.step_update(n)
        rates.append(rate)
    return rates


def test_zh_en_schedule_halves_every_two_epochs_after_ten(synthetic_databin):
    # Yang et al. 2017, section 3.2: 0.7 for 10 epochs, then halved every two epochs, 18 in all
    _, sched = build_scheduler(synthetic_databin, [
        "--lr-scheduler", "epoch_anneal", "--anneal-after-epochs", "10", "--anneal-every", "2",
        "--lr-shrink", "0.5"])
    expected = [0.7] * 10 + [0.35, 0.35, 0.175, 0.175, 0.0875, 0.0875, 0.04375, 0.04375]
    assert epoch_rates(sched, 18) == pytest.approx(expected)


def test_every_epoch_matches_fairseq_fixed_force_anneal(synthetic_databin):
    # the En-De schedule (halved every epoch after 8) both ways: fixed --force-anneal 9
    _, ours = build_scheduler(synthetic_databin, [
        "--lr-scheduler", "epoch_anneal", "--anneal-after-epochs", "8", "--anneal-every", "1",
        "--lr-shrink", "0.5"])
    _, fixed = build_scheduler(synthetic_databin, [
        "--lr-scheduler", "fixed", "--force-anneal", "9", "--lr-shrink", "0.5"])
    rates = epoch_rates(ours, 12)
    assert rates == pytest.approx(epoch_rates(fixed, 12))
    assert rates[7] == pytest.approx(0.7) and rates[8] == pytest.approx(0.35)


def test_resumed_run_keeps_the_schedule(synthetic_databin):
    flags = ["--lr-scheduler", "epoch_anneal", "--anneal-after-epochs", "10", "--anneal-every",
             "2"]
    _, first = build_scheduler(synthetic_databin, flags)
    epoch_rates(first, 13)
    optimizer, resumed = build_scheduler(synthetic_databin, flags)
    resumed.load_state_dict(first.state_dict())
    assert optimizer.get_lr() == pytest.approx(0.7)  # fresh optimizer before the epoch starts
    resumed.step_begin_epoch(14)
    assert resumed.step_update(1) == pytest.approx(0.175)


@pytest.mark.parametrize("flags, match", [
    (["--anneal-every", "0"], "--anneal-every must be >= 1"),
    (["--anneal-after-epochs", "-1"], "--anneal-after-epochs must be >= 0"),
    (["--lr-shrink", "1.5"], r"--lr-shrink must be in \(0, 1\]"),
])
def test_bad_flags_are_named(synthetic_databin, flags, match):
    with pytest.raises(ValueError, match=match):
        build_scheduler(synthetic_databin, ["--lr-scheduler", "epoch_anneal", *flags])
