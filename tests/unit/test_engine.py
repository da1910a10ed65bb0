"""The reproduction engine's own logic in this process: its runs' commands go to a stand-in for
fairseq (``ran_lab.reproduce.process.runner``) that writes what fairseq-train and
fairseq-generate would (a log, checkpoints, hypotheses), so the scheduler, the store, ``--resume``,
the table and the errors run without a fairseq process. End-to-end runs with fairseq itself are
tests/test_reproduce*.py."""
import json
import re

import pytest
import torch

from helpers import REPO

SYSTEMS = ("TransF", "RAN-ALL")


class FakeFairseq:
    """fairseq-train and fairseq-generate as the engine sees them: a training writes its log
    lines and checkpoints at --max-update; a decoding writes S-/T-/H- lines (the reference, one
    word shorter for every system but the first) and its timing line. ``fail`` names a system
    whose training exits 1."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def run(self, cmd, log, env, pass_fds):
        module, argv = cmd[3], cmd[4:]
        flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        self.calls.append((module, flags.get("--save-dir") or flags.get("--path")))
        if module == "train":
            return self.train(flags, log)
        return self.generate(argv[0], flags, log)

    def train(self, flags, log):
        save_dir = flags["--save-dir"]
        if self.fail and f"/{self.fail}/" in save_dir + "/":
            log.write("Traceback (most recent call last):\nRuntimeError: out of memory\n")
            return 1
        updates = int(flags["--max-update"])
        log.write("num. shared model params: 1,234 (num. trained: 1,234)\n"
                  f"| train | epoch 001 | loss 5.0 | wps 1000.0 | num_updates {updates} "
                  "| train_wall 3 | wall 4\n"
                  f"| valid | epoch 001 | valid on 'valid' subset | loss 4.5 | num_updates "
                  f"{updates}\n")
        state = {"optimizer_history": [{"num_updates": updates}],
                 "extra_state": {"train_iterator": {"epoch": 1}, "val_loss": 4.5,
                                 "previous_training_time": 3.0}}
        for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
            torch.save(state, f"{save_dir}/{name}")
        return 0

    def generate(self, data, flags, log):
        subset, tgt = flags["--gen-subset"], flags["--target-lang"]
        refs = open(f"{data}/{subset}.tok.{tgt}", encoding="utf-8").read().splitlines()
        first = f"/{SYSTEMS[0]}/" in flags["--path"]
        for i, ref in enumerate(refs):
            hyp = ref if first else " ".join(ref.split()[:-1])
            log.write(f"S-{i}\tsource {i}\nT-{i}\t{ref}\nH-{i}\t-0.5\t{hyp}\n")
        log.write(f"Translated {len(refs)} sentences ({len(refs) * 5} tokens) in 0.5s "
                  f"({2 * len(refs):.2f} sentences/s, {10 * len(refs):.2f} tokens/s)\n")
        return 0


@pytest.fixture
def data(tmp_path):
    """A data-bin folder as far as the engine reads it itself: raw and tokenized text."""
    folder = tmp_path / "bin.de-en"
    folder.mkdir()
    words = "a man is riding a bike down the street in the city today".split()
    for subset in ("test", "valid"):
        refs = [" ".join(words[i % 5:i % 5 + 6]) + f" {i}" for i in range(12)]
        for name in (f"{subset}.raw.en", f"{subset}.tok.en"):
            (folder / name).write_text("".join(r + "\n" for r in refs))
        (folder / f"{subset}.raw.de").write_text("".join(f"quelle {i}\n" for i in range(12)))
    # what fairseq reads (the stand-in reads none of it): the engine checks it is there
    for name in ["dict.de.txt", "dict.en.txt"] + [f"{split}.de-en.{lang}.{ext}"
                                                  for split in ("train", "valid", "test")
                                                  for lang in ("de", "en")
                                                  for ext in ("bin", "idx")]:
        (folder / name).touch()
    return str(tmp_path / "bin.{src}-{tgt}")


def engine(argv, fake):
    """scripts/reproduce-ran.sh's engine in this process, fairseq replaced by ``fake``: its exit
    status (0, or the error)."""
    from ran_lab.reproduce import process
    from ran_lab.reproduce.cli import run_paper
    from ran_lab.reproduce.papers import PAPERS

    with process.runner(fake):
        try:
            run_paper(PAPERS["ran"], [str(a) for a in argv])
        except SystemExit as e:
            return e.code
    return 0


def argv(tmp_path, data, *more):
    return ["--config", REPO / "configs" / "ran" / "cpu.json", "--data", data, "--pairs",
            "de-en", "--systems", ",".join(SYSTEMS), "--max-update", "3", "--threads", "1",
            "--out", tmp_path / "out", "--checkpoints", tmp_path / "ckpt", *more]


def test_runs_make_a_table_and_resume_skips_them(tmp_path, data, capsys):
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data), fake) == 0
    assert [m for m, _ in fake.calls] == ["train", "generate", "train", "generate"]  # --jobs 1
    table = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {r["system"]: r for r in table["results"]}
    assert set(rows) == set(SYSTEMS)
    assert rows["TransF"]["sacrebleu"] == pytest.approx(100.0)
    assert rows["RAN-ALL"]["sacrebleu"] < 100.0 and rows["RAN-ALL"]["params"] == 1234
    assert rows["TransF"]["selected"]["num_updates"] == 3
    text = (tmp_path / "out" / "TABLE.md").read_text()
    assert re.search(r"\| TransF \|", text) and re.search(r"\| RAN-ALL \|", text)
    # --resume: every run is done, nothing is run again, the table is the same
    again = FakeFairseq()
    assert engine(argv(tmp_path, data, "--resume"), again) == 0
    assert again.calls == []
    assert json.loads((tmp_path / "out" / "results.json").read_text())["results"] == \
        table["results"]
    assert "done before, skipped (--resume)" in capsys.readouterr().err


def test_a_failed_training_names_its_log_and_keeps_the_other_run(tmp_path, data, capsys):
    status = engine(argv(tmp_path, data, "--jobs", "1"), FakeFairseq(fail="RAN-ALL"))
    message = str(status)
    assert status not in (0, None)
    assert "fairseq-train" in message and "failed with exit code 1" in message, message
    assert "RuntimeError: out of memory" in message
    assert (tmp_path / "out" / "de-en" / "TransF" / "seed1" / "result.json").is_file()
    # the failed run is made by the next --resume, the finished one is not made again
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data, "--resume"), fake) == 0
    assert [m for m, _ in fake.calls] == ["train", "generate"]
    assert all("/RAN-ALL/" in path for _, path in fake.calls)


def test_the_runner_seam_is_where_every_command_goes(tmp_path):
    """Every command of a run goes through process.RUNNER (the engine starts no process of its
    own past it), and the seam is restored after the block."""
    from ran_lab.reproduce import process

    fake = FakeFairseq()
    before = process.RUNNER
    log = tmp_path / "log"
    with process.runner(fake):
        process.run_logged(["-m", "ran_lab.run_fairseq", "train", "data", "--save-dir",
                            str(tmp_path), "--max-update", "2"], log, {}, "fairseq-train")
    assert fake.calls == [("train", str(tmp_path))] and process.RUNNER is before
    assert "num_updates 2" in log.read_text()
