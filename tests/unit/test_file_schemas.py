"""Every kind of file the lab reads has one schema (ran_lab.common.schema), checked when it is
read: a file of the wrong shape is one line naming the file, the key and what was expected, and a
string where a list belongs is refused, never iterated (``"seeds": "12"`` ran seeds 1 and 2); a
paper file is data, naming functions of the project only."""
import json
import math
import shutil

import pytest

from helpers import REPO
from test_engine import FakeFairseq, argv, data, engine  # noqa: F401  (data: a fixture)

CONFIG = REPO / "configs" / "ran" / "cpu.json"


def config_with(tmp_path, change=None, systems=None, paper=None):
    """configs/ran/cpu.json with ``change`` (a dict of keys, or a whole value), its systems file
    and paper numbers optionally replaced (their JSON values); the config's path."""
    config = json.loads(CONFIG.read_text())
    for name, value, key in (("systems.json", systems, "systems"),
                             ("paper.json", paper, "paper")):
        if value is not None:
            (tmp_path / name).write_text(json.dumps(value))
            config[key] = str(tmp_path / name)
    config.pop("speed_bench", None)
    config = dict(config, **change) if isinstance(change, dict) else \
        (config if change is None else change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def load_error(path):
    from ran_lab.reproduce.config import load_config
    from ran_lab.common import LabError

    with pytest.raises(LabError) as e:
        load_config(path)
    message = str(e.value)
    assert "\n" not in message and str(path.parent) in message
    return message


def systems(**change):
    spec = json.loads((REPO / "configs" / "ran" / "systems.json").read_text())
    return dict(spec, **change)


def paper(**change):
    return dict(json.loads((REPO / "configs" / "ran" / "paper.json").read_text()), **change)


@pytest.mark.parametrize("change, key, expected", [
    ({"seeds": "12"}, '"seeds"', "a non-empty list of integers 0..4294967295"),
    ({"seeds": [1, 2 ** 32]}, '"seeds[1]"', "an integer 0..4294967295"),
    ({"significance": [1]}, '"significance"', "an object"),
    ({"significance": {"samples": "many"}}, '"significance.samples"', "an integer >= 100"),
    ({"select": ["last"]}, '"select"', 'one of "last", "loss", "bleu"'),
    ({"pairs": 5}, '"pairs"', "a non-empty list"),
    ({"pairs": "de-en"}, '"pairs"', "a non-empty list"),
    ({"train_flags": "--dropout 0.1"}, '"train_flags"', "a list of strings"),
    ([1, 2], "the file", "an object"),
], ids=["seeds-string", "seed-too-big", "significance-list", "samples-string", "select-list",
        "pairs-number", "pairs-string", "train-flags-string", "config-list"])
def test_a_config_of_the_wrong_shape_is_one_line(tmp_path, change, key, expected):
    message = load_error(config_with(tmp_path, change))
    assert f"{key}: expected {expected}" in message, message


@pytest.mark.parametrize("spec, expected", [
    (systems(common_flags="--dropout 0.1"), '"common_flags": expected a list of strings'),
    (systems(common_flags=["--save-dir", "/tmp/x"]), "common_flags sets --save-dir"),
    (systems(common_flags=["--arch", "transformer"]), "common_flags sets --arch"),
    (systems(systems=[]), '"systems": expected a non-empty list'),
    (systems(systems=[{"name": "a\nb", "arch": "ran_transformer_small"}]),
     '"systems[0].name": expected a non-empty string on one line'),
    ([], "the file: expected an object"),
], ids=["common-flags-string", "common-flags-save-dir", "common-flags-arch", "no-systems",
        "name-with-newline", "a-list"])
def test_a_systems_file_of_the_wrong_shape_is_one_line(tmp_path, spec, expected):
    message = load_error(config_with(tmp_path, systems=spec))
    assert expected in message and "systems.json" in message, message


@pytest.mark.parametrize("numbers, expected", [
    (paper(columns=[5]), '"columns[0]": expected an object (a column)'),
    ([], "the file: expected an object"),
    (paper(columns="t1"), '"columns": expected a list of objects'),
], ids=["column-number", "a-list", "columns-string"])
def test_paper_numbers_of_the_wrong_shape_are_one_line(tmp_path, numbers, expected):
    message = load_error(config_with(tmp_path, paper=numbers))
    assert expected in message and "paper.json" in message, message


@pytest.mark.parametrize("template, expected", [
    ("{root}/bin.{src}-{tgt}", "unknown field {root}"),
    ("bin.{src-{tgt}", "bin.{src-{tgt}': unexpected '{' in field name"),
    ("bin.{0}", "bin.{0}': Replacement index 0 out of range"),
])
def test_a_data_template_with_other_fields_is_one_line(tmp_path, template, expected):
    message = engine(argv(tmp_path, str(tmp_path / template)), FakeFairseq())
    assert isinstance(message, str) and expected in message and "\n" not in message, message
    assert message.startswith("reproduce-ran: error: --data '")


def test_a_data_folder_that_does_not_exist_is_refused_before_training(tmp_path):
    fake = FakeFairseq()
    message = engine(argv(tmp_path, str(tmp_path / "nowhere.{src}-{tgt}")), fake)
    assert isinstance(message, str) and "--data" in message and "nowhere.de-en" in message
    assert "does not exist" in message and fake.calls == []


def test_a_seed_above_fairseqs_range_is_refused(tmp_path, data, capsys):  # noqa: F811
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data, "--seeds", f"1,{2 ** 32}"), fake) == 2
    assert f"--seeds: seed {2 ** 32} is above 4294967295" in capsys.readouterr().err
    assert fake.calls == []


RESULT = "out/de-en/RAN-ALL/seed1/result.json"


@pytest.mark.parametrize("edit, key", [
    (lambda r: dict(r, sacrebleu=math.nan), '"sacrebleu": expected a finite number'),
    (lambda r: dict(r, params="1234"), '"params": expected an integer >= 0 or null'),
    (lambda r: dict(r, seed=-1), '"seed": expected an integer 0..4294967295'),
    (lambda r: {k: v for k, v in r.items() if k != "ter"}, '"ter": expected a finite number '
                                                           '(a required key, missing)'),
], ids=["nan", "params-string", "seed-negative", "missing"])
def test_a_hand_edited_result_never_reaches_a_table(tmp_path, data, edit, key):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    path = tmp_path / RESULT
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    table = (tmp_path / "out" / "TABLE.md").read_text()
    fake = FakeFairseq()
    message = engine(argv(tmp_path, data, "--resume"), fake)
    assert isinstance(message, str) and str(path) in message and key in message, message
    assert "\n" not in message and fake.calls == []
    assert (tmp_path / "out" / "TABLE.md").read_text() == table


def test_a_results_json_row_of_the_wrong_type_is_one_line(tmp_path, data):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    path = tmp_path / "out" / "results.json"
    report = json.loads(path.read_text())
    report["results"][0]["chrf"] = "high"
    path.write_text(json.dumps(report))
    message = engine(argv(tmp_path, data, "--resume"), FakeFairseq())
    assert isinstance(message, str) and str(path) in message
    assert '"results[0].chrf": expected a finite number' in message, message


@pytest.mark.parametrize("record, key", [
    ({"argv": "fairseq-train", "seconds": 3}, '"argv": expected a list of strings'),
    ([], "the file: expected an object"),
    ({"argv": []}, '"seconds"'),
])
def test_a_train_finished_record_of_the_wrong_shape_under_resume(tmp_path, data, record, key):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    (tmp_path / RESULT).unlink()
    path = tmp_path / "ckpt" / "de-en" / "RAN-ALL" / "seed1" / "train_finished.json"
    path.write_text(json.dumps(record))
    message = engine(argv(tmp_path, data, "--resume"), FakeFairseq())
    assert isinstance(message, str) and str(path) in message and key in message, message
    assert "\n" not in message


@pytest.mark.parametrize("record", [{"job_id": [7]}, [], {"id": 7}])
def test_a_slurm_record_of_the_wrong_shape_is_one_line(tmp_path, data, record):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    path = tmp_path / "out" / "de-en" / "RAN-ALL" / "seed1" / "slurm.json"
    path.write_text(json.dumps(record))
    message = engine(argv(tmp_path, data, "--resume"), FakeFairseq())
    assert isinstance(message, str) and str(path) in message and "job_id" in message \
        or "expected an object" in message, message
    assert "\n" not in message


@pytest.mark.parametrize("edit, expected", [
    (lambda s: dict(s, significance=dict(s["significance"], level="0.01")),
     '"settings.significance.level": expected a finite number in (0, 1), found a string'),
    (lambda s: {k: v for k, v in s.items() if k != "paper_file"},
     '"settings.paper_file": expected a non-empty string (a required key, missing)'),
    (lambda s: dict(s, baseline=["TransF"]), '"settings.baseline": expected a non-empty string'),
], ids=["level-string", "no-paper-file", "baseline-list"])
def test_claims_on_table_data_of_the_wrong_shape_is_one_line(tmp_path, data, edit, expected):  # noqa: F811
    import os
    import subprocess
    import sys

    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    path = tmp_path / "out" / "results.json"
    report = json.loads(path.read_text())
    path.write_text(json.dumps(dict(report, settings=edit(report["settings"]))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH",
                                                                                  "")]))
    proc = subprocess.run([sys.executable, "-m", "ran_lab.claims.cli", "--results",
                           str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          cwd=REPO)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in proc.stderr and expected in proc.stderr, proc.stderr


def test_a_truncated_hypotheses_file_under_resume_is_one_line(tmp_path, data):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    hyps = tmp_path / "out" / "de-en" / "RAN-ALL" / "seed1" / "hyp.detok.txt"
    hyps.write_text("".join(hyps.read_text().splitlines(True)[:5]))
    message = engine(argv(tmp_path, data, "--resume"), FakeFairseq())
    assert isinstance(message, str) and "\n" not in message, message
    assert f"{hyps} (the run's hypotheses) has 5 lines for the 12 references" in message
    assert "delete the run's result.json" in message


def test_slurm_launcher_with_no_slurm_running_is_one_line(tmp_path, data, monkeypatch):  # noqa: F811
    """sbatch refusing the job (no controller to reach) is one line with sbatch's reason (it was
    submitit's FailedJobError with its traceback); so is a cluster whose accounting (sacct, where
    the jobs' states are read) does not answer, before anything is submitted."""
    pytest.importorskip("submitit")
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "srun", "sacct"):
        (bin_dir / tool).write_text(
            "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Unable to contact "
            "slurm controller (connect failure)' >&2\nexit 1\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    message = engine(argv(tmp_path, data, "--launcher", "slurm", "--time-limit", "5"),
                     FakeFairseq())
    assert isinstance(message, str) and "\n" not in message, message
    assert "sacct fails here (sbatch: error: Batch job submission failed: Unable to contact " \
        "slurm controller" in message and "with slurmdbd?" in message, message
    assert not list(tmp_path.rglob("slurm.json"))
    (bin_dir / "sacct").write_text("#!/bin/sh\n")  # an accounting that answers
    message = engine(argv(tmp_path, data, "--launcher", "slurm", "--time-limit", "5"),
                     FakeFairseq())
    assert isinstance(message, str) and "\n" not in message, message
    assert "sbatch did not take the job" in message and "Unable to contact slurm controller" \
        in message, message


class FullDisk(FakeFairseq):
    """A training that stops as fairseq does when a checkpoint finds no room: its chained
    tracebacks in the log, exit status 1."""

    def train(self, flags, log):
        path = f"{flags['--save-dir']}/checkpoint_last.pt"
        log.write("Traceback (most recent call last):\n  File \"trainer.py\", line 1, in save\n"
                  "RuntimeError: [enforce fail at inline_container.cc:595] . "
                  "PytorchStreamWriter failed writing file data/3: file write failed\n\n"
                  "During handling of the above exception, another exception occurred:\n\n"
                  "Traceback (most recent call last):\n"
                  f"OSError: [Errno 28] No space left on device: '{path}'\n")
        return 1


def test_a_full_checkpoint_disk_is_one_line_naming_the_file(tmp_path, data):  # noqa: F811
    message = engine(argv(tmp_path, data), FullDisk())
    assert isinstance(message, str) and "\n" not in message, message
    path = tmp_path / "ckpt" / "de-en" / "TransF" / "seed1" / "checkpoint_last.pt"
    assert f"the disk is full (writing {path})" in message and "--resume" in message


def assert_read_error(path, text, read, error, expected):
    """``text`` written to ``path`` and read by ``read(path, REPO)`` raises ``error``, whose message
    names the file and says ``expected``."""
    path.write_text(text)
    with pytest.raises(error) as e:
        read(path, REPO)
    assert str(path) in str(e.value) and expected in str(e.value), str(e.value)


@pytest.mark.parametrize("text, expected", [
    ("[]", "the file: expected an object"),
    ('{"paper": "x", "claims": "c1"}', '"claims": expected a list of objects'),
    ('{"paper": "x", "claims": [5]}', '"claims[0]": expected an object (a claim)'),
    ('{"paper": "x", "claims": [], "defaults": []}', '"defaults": expected an object'),
], ids=["a-list", "claims-string", "claim-number", "defaults-list"])
def test_a_claims_file_of_the_wrong_shape_is_one_line(tmp_path, text, expected):
    from ran_lab.claims.spec import load
    from ran_lab.common import LabError

    assert_read_error(tmp_path / "claims.json", text, load, LabError, expected)


@pytest.mark.parametrize("edit, expected", [
    ({"seeds": {"de-en": [1, 1]}}, '"seeds.de-en": expected a non-empty list of integers'),
    ({"cost": {"pair": "de-en", "seed": 1, "train_updates": 60, "threads": [0]}},
     '"cost.threads[0]": expected an integer >= 1 or one of "all"'),
    ({"surprise": 1}, '"surprise": expected no such key'),
], ids=["seed-twice", "threads-zero", "unknown-key"])
def test_a_board_plan_of_the_wrong_shape_is_one_line(tmp_path, edit, expected):
    from ran_lab.common import LabError
    from ran_lab.leaderboard.board import load_board

    plan = {**json.loads((REPO / "configs/leaderboard/board.json").read_text()), **edit}
    assert_read_error(tmp_path / "board.json", json.dumps(plan), lambda p, _: load_board(p),
                      LabError, expected)


@pytest.mark.parametrize("text, expected", [
    ('[{"folder": "results/ran/short", "paper": "ran", "config": "configs/ran/cpu.json", '
     '"pairs": "de-en", "systems": ["x"], "seeds": [1], "threads": 1, "jobs": 1}]',
     '"[0].pairs": expected a non-empty list of non-empty strings'),
    ('[{"folder": "results/ran/short\\nx", "paper": "ran", "config": "configs/ran/cpu.json", '
     '"pairs": ["de-en"], "systems": ["x"], "seeds": [1], "threads": 1, "jobs": 1}]',
     '"[0].folder": expected a non-empty string on one line'),
    ('{"folder": "results/ran/short"}', "the file: expected a list"),
], ids=["pairs-string", "folder-newline", "an-object"])
def test_a_remake_manifest_of_the_wrong_shape_is_one_line(tmp_path, text, expected):
    from ran_lab.common import LabError
    from ran_lab.remake import load_manifest

    assert_read_error(tmp_path / "REMAKE.json", text, load_manifest, LabError, expected)


# ---- a paper file is data: it names functions of the project only -----------------------------

@pytest.mark.parametrize("name", [
    "os:system", "subprocess:run", "builtins:eval",
    "ran_lab.reproduce.launch.slurm:subprocess",  # a module the project imports
    "ran_lab.remake:_private", "ran_lab.remake:os.system",
    "ran_fairseqx.evil:f",
])
def test_a_paper_file_names_only_functions_of_the_project(tmp_path, name):
    from ran_lab.common import LabError
    from ran_lab.reproduce import papers

    folder = tmp_path / "pervasive"
    shutil.copytree(REPO / "configs" / "pervasive", folder)
    spec = json.loads((folder / "reproduce.json").read_text())
    for where in ("measure", "compute"):
        changed = dict(spec)
        if where == "measure":
            changed["measure"] = name
        else:
            changed["columns"] = [{"title": "x", "compute": name}]
        (folder / "reproduce.json").write_text(json.dumps(changed))
        with pytest.raises(LabError, match=f"'{where}' '{name}'"):
            papers.load_paper(folder)
    (folder / "reproduce.json").write_text(json.dumps(spec))
    assert papers.load_paper(folder).measure.__name__ == "pervasive_measure"
