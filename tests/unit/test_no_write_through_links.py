"""No write of the engine leaves the folder it names: a symbolic link in a results folder (one
copied from elsewhere, say) where the engine writes or locks a file (a run's generate.txt, its
``.seedN.lock``, the table's ``.table.lock``) is refused in one line naming it, and the file it
points to is left as it was. The engine runs in-process with a stand-in for fairseq."""
import os

import pytest

from ran_text import textio
from test_engine import FakeFairseq, argv, data, engine  # noqa: F401  (data: a fixture)

VICTIM = "a file outside the results folder\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text(VICTIM)
    return path


def link(path, target):
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)
    return path


@pytest.mark.parametrize("where", [
    "de-en/TransF/seed1/generate.txt",  # fairseq-generate's output, written into the run folder
    "de-en/TransF/.seed1.lock",  # the run folder's lock
    ".table.lock",  # the table's lock
    "de-en/RAN-ALL/seed1/train.log",
    "results.json",
])
def test_a_link_where_the_engine_writes_is_refused(tmp_path, data, victim, where):  # noqa: F811
    placed = link(tmp_path / "out" / where, victim)
    fake = FakeFairseq()
    message = engine(argv(tmp_path, data), fake)
    assert message and f"{placed} is a symbolic link" in str(message), message
    assert "\n" not in str(message) and fake.calls == []  # refused before anything ran
    assert victim.read_text() == VICTIM and placed.is_symlink()


def test_a_linked_folder_below_the_results_folder_is_refused(tmp_path, data, victim):  # noqa: F811
    placed = link(tmp_path / "out" / "de-en", victim.parent)
    message = engine(argv(tmp_path, data), FakeFairseq())
    assert f"{placed} is a symbolic link" in str(message)
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


def test_a_lock_file_is_never_opened_through_a_link(tmp_path, victim):
    lock_file = link(tmp_path / "folder" / ".lock", victim)
    with pytest.raises(textio.LockedError) as e:
        textio.FolderLock(tmp_path / "folder", "the run folder", lock_file).acquire()
    assert f"{lock_file} is a symbolic link" in str(e.value)
    assert victim.read_text() == VICTIM
    # a lock held by another holder still names it
    (tmp_path / "other").mkdir()
    held = textio.FolderLock(tmp_path / "other", "the run folder").acquire()
    try:
        pid = os.fork()
        if pid == 0:  # another process: the lock is busy, its message names the holder
            try:
                textio.FolderLock(tmp_path / "other", "the run folder").acquire()
                os._exit(3)
            except textio.FolderBusy as busy:
                os._exit(0 if f"process {os.getppid()}" in str(busy) else 4)
        assert os.waitpid(pid, 0)[1] >> 8 == 0
    finally:
        held.release()


def test_a_log_is_never_written_through_a_link(tmp_path, victim):
    from ran_lab.common import LabError
    from ran_lab.reproduce.process import open_log

    log = link(tmp_path / "run" / "train.log", victim)
    for mode in ("w", "a"):
        with pytest.raises(LabError, match="is a symbolic link"):
            open_log(log, mode)
    assert victim.read_text() == VICTIM


def test_submitits_own_links_in_a_runs_slurm_folder_are_not_refused(tmp_path):
    """submitit links ``.submission_file_*.sh`` to the job's script in the run's slurm/ folder; the
    engine writes nothing through it. Any other link there is still refused."""
    from ran_lab.reproduce.locks import link_below

    slurm = tmp_path / "out" / "de-en" / "TransF" / "seed1" / "slurm"
    slurm.mkdir(parents=True)
    (slurm / "123_submission.sh").write_text("#!/bin/bash\n")
    (slurm / ".submission_file_abc.sh").symlink_to(slurm / "123_submission.sh")
    assert link_below(tmp_path / "out", slurm.parent) is None
    (slurm / "123_0_log.out").symlink_to(tmp_path / "elsewhere")
    assert link_below(tmp_path / "out", slurm.parent) == slurm / "123_0_log.out"
