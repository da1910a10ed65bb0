"""Nothing a run made is lost (issue 56, items 1, 2 and 4): two engines on one --out whose runs
interleave (the second finishes between the first one's start and its table), a system name that
gives no folder name, and stored results of the wrong shape."""
import json
import re

import pytest

import helpers
from test_reproduce import config, corpus  # noqa: F401  (module fixtures: a tiny data-bin, a config)

SCRIPT = helpers.REPO / "scripts" / "reproduce-ran.sh"


def engine_in_process(argv):
    """scripts/reproduce-ran.sh's engine in this process: (exit status, stderr)."""
    from ran_lab.reproduce.cli import run_paper
    from ran_lab.reproduce.papers import PAPERS

    try:
        run_paper(PAPERS["ran"], [str(a) for a in argv])
    except SystemExit as e:
        return e.code
    return 0


def test_an_engine_that_finished_meanwhile_keeps_its_row(corpus, config, tmp_path, monkeypatch,  # noqa: F811
                                                        capsys):
    """Engine B (TransF, 2 updates) passes its start checks on an empty --out; engine A (RAN-ALL,
    3 updates: other settings) starts after them and finishes, table written, before B's table.
    B's table would drop A's row: B refuses naming A's result, A's table stays, and B's result
    is kept on disk."""
    from ran_lab.reproduce import cli

    _, data = corpus
    out = tmp_path / "out"
    common = ["--config", config, "--data", data, "--pairs", "de-en", "--threads", "1", "--out",
              out, "--checkpoints", tmp_path / "ckpt"]
    real = cli.make_all
    other = {}

    def a_finishes_meanwhile(*args, **kwargs):
        other["proc"] = helpers.run_reproduction(SCRIPT, *common, "--systems", "RAN-ALL",
                                                 "--max-update", "3")
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "make_all", a_finishes_meanwhile)
    status = engine_in_process(common + ["--systems", "TransF", "--max-update", "2"])
    assert other["proc"].returncode == 0, other["proc"].stderr[-3000:]
    table_of_a = json.loads((out / "results.json").read_text())
    assert [r["system"] for r in table_of_a["results"]] == ["RAN-ALL"]
    assert status not in (0, None), "the second table dropped the first engine's row"
    message = str(status)
    assert "the table was not written" in message and "RAN-ALL/seed1/result.json was made with " \
        "other settings (training: --max-update 3 → 2)" in message, message
    assert (out / "de-en" / "TransF" / "seed1" / "result.json").is_file()  # kept
    assert json.loads((out / "results.json").read_text()) == table_of_a  # A's table as it was


@pytest.mark.parametrize("name", ["...", "", "/", "&&", " _ "])
def test_a_system_name_that_gives_no_folder_is_refused_with_the_name(tmp_path, name):
    """A name that slugs to nothing would put its runs in OUT/PAIR/seedN, the folder of a system
    named 'seed1' (whose results the run would delete)."""
    from ran_lab.common.paths import slug
    from ran_lab.reproduce.config import load_systems
    from ran_lab.reproduce.errors import ReproError

    with pytest.raises(ValueError, match=re.escape(repr(name))):
        slug(name)
    if not name:
        return  # a systems file refuses an empty name before (it needs a string 'name')
    systems = json.loads((helpers.REPO / "configs" / "ran" / "systems.json").read_text())
    systems["systems"] += [{"name": name, "arch": "ran_transformer_small"},
                           {"name": "seed1", "arch": "ran_transformer_small"}]
    path = tmp_path / "systems.json"
    path.write_text(json.dumps(systems))
    with pytest.raises(ReproError, match=re.escape(f"system name {name!r} gives no folder name")):
        load_systems(path)


@pytest.mark.parametrize("file, text", [
    ("results.json", "[]"), ("results.json", '{"results": [5]}'),
    ("results.json", '{"results": {"a": 1}}'), ("result.json", "[]"), ("result.json", "5"),
])
def test_stored_results_of_the_wrong_shape_are_named(tmp_path, file, text):
    from test_faults import engine_run

    out = tmp_path / "out"
    folder = out if file == "results.json" else out / "de-en" / "TransF" / "seed1"
    folder.mkdir(parents=True)
    (folder / file).write_text(text)
    proc = engine_run(tmp_path, out=out)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().split("\n")
    assert str(folder / file) in lines[-1] and "delete it" in lines[-1], proc.stderr
