"""The lab's messages name what the user must change: a failed Slurm job's error (its stderr goes
into its output file), the file a full disk or a file-size limit stopped, the command's own name
as the prefix, a config without a corpus to prepare, a data-bin built halfway, a finished run put
back by the next engine. The engine runs in-process with a stand-in for fairseq."""
import errno
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ran_text import textio
from test_engine import FakeFairseq, argv, data, engine  # noqa: F401  (data: a fixture)

REPO = Path(__file__).resolve().parents[2]


def test_a_failed_slurm_job_s_error_is_read_from_its_output(tmp_path, monkeypatch):
    """Jobs are submitted with stderr into stdout (``stderr_to_stdout``): the reason is there."""
    pytest.importorskip("submitit")
    from ran_lab.reproduce.launch import slurm

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "run" / "slurm"
    folder.mkdir(parents=True)
    (folder / "77_0_log.out").write_text(
        "submitit INFO starting\nTraceback (most recent call last):\n  File \"x\", line 1\n"
        "ValueError: --max-tokens must be positive\nsrun: error: task 0 exited\n")
    why = slurm.failure(SimpleNamespace(dir=tmp_path / "run"), "77", "FAILED")
    assert why.startswith("ended FAILED: ValueError: --max-tokens must be positive"), why


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG], ids=["full-disk", "ulimit-f"])
def test_a_write_that_found_no_room_names_its_file(tmp_path, code):
    def write(f):
        raise OSError(code, "no room")

    target = tmp_path / "results.json"
    with pytest.raises(OSError) as e:
        textio.atomic_write(target, write)
    assert str(target) in textio.os_error_line(e.value)
    assert "a file" not in textio.os_error_line(e.value)
    assert list(tmp_path.iterdir()) == []  # its partial file removed


def test_a_file_size_limit_names_the_file_the_engine_wrote(tmp_path):
    """``ulimit -f``: the write fails with EFBIG (Python ignores SIGXFSZ), naming no file."""
    target = tmp_path / "result.json"
    code = ("import resource, sys\nfrom ran_text import textio\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "@textio.one_line_errors('ran-reproduce')\ndef main():\n"
            f"    textio.write_json({str(target)!r}, {{'x': 'y' * 100000}})\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 1 and str(target) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "a file:" not in proc.stderr


def exit_message(main, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    return str(e.value.code)


def test_errors_begin_with_the_command_s_name(tmp_path):
    from ran_lab.bench.cli import main as bench
    from ran_lab.claims.cli import main as claims
    from ran_text.evaluate import main as evaluate

    (tmp_path / "ref.txt").write_text("a b\n")
    assert exit_message(evaluate, ["--hyp", str(tmp_path / "none.txt"), "--ref",
                                   str(tmp_path / "ref.txt")]).startswith("ran-evaluate: error:")
    assert exit_message(claims, ["--results", str(tmp_path)]).startswith("ran-claims: error:")
    assert exit_message(bench, ["--systems", str(tmp_path / "none.json"), "--data",
                                str(tmp_path), "--out", str(tmp_path / "o")]).startswith(
        "ran-bench: error:")


def test_a_config_that_prepares_nothing_needs_data(tmp_path, data):  # noqa: F811
    config = json.loads((REPO / "configs" / "ran" / "cpu.json").read_text(encoding="utf-8"))
    path = tmp_path / "none.json"
    path.write_text(json.dumps(dict(config, prepare=None)), encoding="utf-8")
    args = argv(tmp_path, data)
    args[args.index("--config") + 1] = path
    del args[args.index("--data"):args.index("--data") + 2]
    message = str(engine(args, FakeFairseq()))
    assert '"prepare" is null' in message and "give --data" in message and "\n" not in message


def test_a_half_built_data_bin_is_refused_before_training(tmp_path, data, capsys):  # noqa: F811
    folder = Path(data.format(src="de", tgt="en"))
    (folder / "train.de-en.en.bin").unlink()
    (folder / "dict.en.txt").unlink()
    fake = FakeFairseq()
    message = str(engine(argv(tmp_path, data), fake))
    assert fake.calls == []  # nothing trained
    assert f"the data-bin {folder} is not whole: it lacks dict.en.txt, train.de-en.en.bin" \
        in message and "\n" not in message, message


def test_a_finished_run_put_back_names_its_folder(tmp_path, data, capsys):  # noqa: F811
    """A replacement killed before its result.json (SIGKILL): the next engine puts the finished
    run back and says where."""
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    run = tmp_path / "out" / "de-en" / "RAN-ALL" / "seed1"
    run.rename(run.with_name(".seed1.replaced"))
    run.mkdir()  # the replacement's folder, without a result
    capsys.readouterr()
    assert engine(argv(tmp_path, data, "--resume"), FakeFairseq()) == 0
    err = capsys.readouterr().err
    assert f"the finished run was put back from its folder set aside into {run}" in err, err
