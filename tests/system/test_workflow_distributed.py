"""Multi-process workflows: a run of two CPU ranks under torchrun that is stopped and started again
holds the same parameters on both ranks (each rank's own batch-norm statistics), goes on where it
stopped and ends where an uninterrupted run ends, for every architecture, from
``checkpoint_last.pt`` and from ``--restore-file`` (docs/distributed.md); a resume with a changed
architecture flag stops every rank with the error naming it. (The Slurm requeue of a two-task
run is in tests/system/test_slurm.py.)

fairseq reads a checkpoint on rank 0 and sends its state to the other ranks, which with torch >=
2.6 refused it ("Unsupported global: GLOBAL omegaconf.dictconfig.DictConfig"; corrected by
``ran_fairseq.compat.objects_broadcast_between_ranks``). Each torchrun here starts fresh
processes (tests/ddp_worker.py, which writes each rank's parameters); one torchrun trains the
runs of all four architectures one after the other, since importing fairseq is the costly part."""
import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import REPO, fairseq_env, train_args
from systems import TINY_DYNMEM, TINY_PA, TINY_RAN, TINY_TRANSFORMER

SYSTEMS = {
    "ran_transformer": TINY_RAN,
    "recurrent_cross_transformer": TINY_TRANSFORMER,
    "rnnsearch_dynmem": TINY_DYNMEM,
    "pervasive_attention": TINY_PA,
}
# Two ranks take 4 updates per epoch of the test corpus: the runs stop inside epoch 1, and the
# resumed runs end inside epoch 2.
STOP, BUDGET = 3, 6
RESTORE_ARCH = "pervasive_attention"  # --restore-file takes fairseq's same path for every model


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(root, name, runs):
    """One torchrun of two CPU ranks that trains ``runs`` (``[(dump_dir, flags)]``) one after the
    other as fairseq-train does (tests/ddp_worker.py, which writes each rank's state to
    ``dump_dir``); the CompletedProcess."""
    spec = root / f"{name}.json"
    for dump_dir, _ in runs:
        dump_dir.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps([[str(d), [str(a) for a in flags]] for d, flags in runs]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(_free_port()), str(REPO / "tests" / "ddp_worker.py"),
           "--runs", str(spec)]
    return subprocess.run(cmd, env=fairseq_env(), capture_output=True, text=True, timeout=600)


def _run(data, root, arch, kind, max_update, extra=()):
    """The dump folder and flags of run ``kind`` of ``arch``, saving into ``root/arch/kind`` (the
    stopped and resumed runs share theirs, as one command run twice does)."""
    save = root / arch / ("stopped" if kind == "resumed" else kind)
    flags = train_args(data, save, arch, (*SYSTEMS[arch], *extra), max_update=max_update)
    return root / arch / f"dump-{kind}", flags


@pytest.fixture(scope="module")
def flows(synthetic_databin, tmp_path_factory):
    """Three torchruns: the uninterrupted runs of every architecture to BUDGET beside the runs
    stopped at STOP; then the same commands again to BUDGET, a run of RESTORE_ARCH into a new
    --save-dir through --restore-file of the stopped checkpoint, and, last, a resume of
    ran_transformer with a changed architecture flag (which stops)."""
    data, root = synthetic_databin, tmp_path_factory.mktemp("resume")
    first = {"reference": [_run(data, root, arch, "reference", BUDGET) for arch in SYSTEMS],
             "stopped": [_run(data, root, arch, "stopped", STOP) for arch in SYSTEMS]}
    with ThreadPoolExecutor(2) as pool:
        procs = {name: pool.submit(torchrun, root, name, runs) for name, runs in first.items()}
        procs = {name: proc.result() for name, proc in procs.items()}
    if procs["stopped"].returncode == 0:
        at_stop = root / "at-stop.pt"
        shutil.copy(root / RESTORE_ARCH / "stopped" / "checkpoint_last.pt", at_stop)
        changed = root / "ran_transformer" / "changed"
        changed.mkdir(parents=True)
        shutil.copy(root / "ran_transformer" / "stopped" / "checkpoint_last.pt",
                    changed / "checkpoint_last.pt")
        runs = [_run(data, root, arch, "resumed", BUDGET) for arch in SYSTEMS]
        runs.append(_run(data, root, RESTORE_ARCH, "restored", BUDGET,
                         ("--restore-file", at_stop)))
        runs.append(_run(data, root, "ran_transformer", "changed", BUDGET,
                         ("--no-encoder-positional-embeddings",)))
        procs["again"] = torchrun(root, "again", runs)
    return root, procs


def _report(proc):
    """The end of a torchrun's output, then the error each rank ended with."""
    errors = re.findall(r"^\[rank\d\]: [\w.]*(?:Error|Exception)\b.*$", proc.stderr, re.M)
    return "\n".join([proc.stdout[-2000:], proc.stderr[-3000:], "--- the ranks' errors ---",
                      *errors])


def _ok(proc, what):
    assert proc.returncode == 0, f"{what}:\n{_report(proc)}"


def _ranks(dump_dir):
    import torch

    return [torch.load(dump_dir / f"rank{r}.pt", weights_only=True) for r in (0, 1)]


def _first_runs(root, procs, arch, kind):
    """The first torchruns went well; the run ``kind`` of the second wrote both ranks' states."""
    _ok(procs["reference"], "the uninterrupted runs")
    _ok(procs["stopped"], f"the runs stopped at {STOP} updates")
    assert [r["updates"] for r in _ranks(root / arch / "dump-stopped")] == [STOP, STOP]
    assert (root / arch / f"dump-{kind}" / "rank1.pt").is_file(), _report(procs["again"])


def _same_as_uninterrupted(data, root, arch, kind):
    import torch

    from helpers import build_model

    ours, reference = _ranks(root / arch / f"dump-{kind}"), _ranks(root / arch / "dump-reference")
    assert [r["world_size"] for r in ours] == [2, 2]
    assert [r["updates"] for r in ours] == [BUDGET, BUDGET]
    _, model = build_model(arch, data, SYSTEMS[arch])
    params = [name for name, _ in model.named_parameters()]
    assert params and set(params) <= set(ours[0]["state"])
    # the two ranks of a run hold the same parameters; batch-norm running statistics are each
    # rank's own (fairseq's --broadcast-buffers is off by default; docs/distributed.md)
    for run in (ours, reference):
        for name in params:
            assert torch.equal(run[0]["state"][name], run[1]["state"][name]), name
    if arch == "pervasive_attention":
        stats = [k for k in reference[0]["state"] if k.endswith("running_mean")]
        assert stats and any(not torch.equal(reference[0]["state"][k], reference[1]["state"][k])
                             for k in stats)
    for rank in (0, 1):
        for name in params:
            assert torch.equal(ours[rank]["state"][name], reference[rank]["state"][name]), \
                f"rank {rank}: {name} differs from the uninterrupted run's"
    # rank 0 goes on with its own buffers too (Pervasive Attention's batch-norm statistics; the
    # other ranks take rank 0's from the checkpoint, docs/distributed.md)
    for name, value in reference[0]["state"].items():
        assert torch.equal(ours[0]["state"][name], value), f"rank 0: {name} differs"
    saved = root / arch / ("stopped" if kind == "resumed" else kind) / "checkpoint_last.pt"
    assert _checkpoint(saved)["optimizer_history"][-1]["num_updates"] == BUDGET


@pytest.mark.parametrize("arch", sorted(SYSTEMS))
def test_two_ranks_resume_to_the_uninterrupted_parameters(synthetic_databin, flows, arch):
    """Stopped at STOP updates, the same torchrun command resumes from checkpoint_last.pt and
    stops at exactly BUDGET updates, with the parameters of a run never stopped."""
    root, procs = flows
    _first_runs(root, procs, arch, "resumed")
    log = procs["again"].stdout + procs["again"].stderr
    last = re.escape(str(root / arch / "stopped" / "checkpoint_last.pt"))
    assert re.search(rf"Loaded checkpoint {last} \(epoch 1 @ {STOP} updates\)", log), log[-5000:]
    _same_as_uninterrupted(synthetic_databin, root, arch, "resumed")


def test_two_ranks_resume_through_restore_file(synthetic_databin, flows):
    """--restore-file of the stopped run's checkpoint, into another --save-dir."""
    root, procs = flows
    _first_runs(root, procs, RESTORE_ARCH, "restored")
    log = procs["again"].stdout + procs["again"].stderr
    at_stop = re.escape(str(root / "at-stop.pt"))
    assert re.search(rf"Loaded checkpoint {at_stop} \(epoch 1 @ {STOP} updates\)", log), \
        log[-5000:]
    _same_as_uninterrupted(synthetic_databin, root, RESTORE_ARCH, "restored")


def test_changed_flags_stop_every_rank_naming_them(flows):
    """Rank 1 gets the checkpoint from rank 0, not from the file: it checks the architecture flags
    too and stops with the same error, instead of waiting for rank 0 in its first update."""
    root, procs = flows
    _first_runs(root, procs, "ran_transformer", "resumed")
    proc = procs["again"]
    assert proc.returncode != 0
    for rank in (0, 1):
        assert re.search(rf"\[rank{rank}\]: ValueError: resuming from \S+, trained with other "
                         rf"architecture flags than this run's: --no-encoder-positional-embeddings",
                         proc.stderr), _report(proc)
    assert not list((root / "ran_transformer" / "dump-changed").glob("rank*.pt"))


def _checkpoint(path):
    import ran_fairseq  # noqa: F401  (the allow-list of fairseq checkpoints)
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(str(path))
