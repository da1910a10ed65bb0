"""Files written whole or not at all: fairseq's checkpoint copies and saves with the plugin's opt-in
atomic_checkpoint_copies and atomic_checkpoint_saves (each turned on in these tests alone) go
through a temporary file whose name is unique to the writer, renamed into place, and a failed
write (a full disk) leaves neither half a file nor the temporary one; the lab's JSON files
likewise (ran_text.textio.write_json). A kill during fairseq-train's copy:
tests/integration/test_resume.py."""
import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import helpers


def test_checkpoint_writes_use_temporary_names_unique_to_the_writer(tmp_path, monkeypatch):
    helpers.opt_in_fixes(monkeypatch, "atomic_checkpoint_copies", "atomic_checkpoint_saves")
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    renamed = []
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(str(a)), replace(a, b)))
    src = tmp_path / "checkpoint_1_2.pt"
    src.write_bytes(b"x" * 100)
    for _ in range(2):
        PathManager.copy(str(src), str(tmp_path / "checkpoint_last.pt"), overwrite=True)
        checkpoint_utils.torch_persistent_save({"a": 1}, str(tmp_path / "checkpoint_best.pt"))
    assert len(renamed) == 4 and len(set(renamed)) == 4, renamed
    for name in renamed:
        assert re.fullmatch(rf".*\.pt\.tmp-{os.getpid()}-[0-9a-f]{{8}}", name), name
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint_1_2.pt", "checkpoint_best.pt", "checkpoint_last.pt"]


def test_a_failed_checkpoint_write_leaves_no_partial_file(tmp_path, monkeypatch):
    helpers.opt_in_fixes(monkeypatch, "atomic_checkpoint_copies", "atomic_checkpoint_saves")
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    def full_disk(*args, **kwargs):
        target = args[1]
        if isinstance(target, (str, Path)):
            Path(target).write_bytes(b"half a checkpoint")
        else:
            target.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    src = tmp_path / "checkpoint_1_2.pt"
    src.write_bytes(b"x" * 100)
    monkeypatch.setattr(shutil, "copyfileobj", full_disk)
    with pytest.raises(OSError, match="No space left"):
        PathManager.copy(str(src), str(tmp_path / "checkpoint_last.pt"), overwrite=True)
    monkeypatch.setattr(checkpoint_utils, "_torch_persistent_save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        checkpoint_utils.torch_persistent_save({"a": 1}, str(tmp_path / "checkpoint_2_4.pt"))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_1_2.pt"]


def test_json_is_written_through_a_unique_temporary_file(tmp_path, monkeypatch):
    from ran_text import textio

    renamed = []
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append((a, b)), replace(a, b)))
    textio.write_json(tmp_path / "result.json", {"a": 1})
    assert json.loads((tmp_path / "result.json").read_text()) == {"a": 1}
    assert len(renamed) == 1 and str(renamed[0][0]).startswith(str(tmp_path / "result.json.tmp-"))
    # a write that fails leaves the old file whole and no temporary one
    monkeypatch.setattr(textio.json, "dumps", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        textio.write_json(tmp_path / "result.json", {"a": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
