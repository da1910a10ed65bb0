"""results/REMAKE.json and ran_lab.remake: every engine table has a command that remakes
it, each command is one the engine accepts and matches the table's recorded settings, and the
remake check names a folder whose tracked files a command changed (a temporary git repository
with a stand-in script; no fairseq). The last test remakes the smallest table byte for byte in a
copy of the checkout, preparing its data-bin from the raw Multi30k files (opt-in: minutes of CPU)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ran_lab import remake
from ran_lab.common import LabError
from ran_lab.reproduce.cli import run_paper
from ran_lab.reproduce.papers import paper_of

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "results" / "REMAKE.json"
NOT_ENGINE = ("results/bench", "results/quickstart")  # other tools' folders


def engine_tables():
    """The folders under results/ holding a TABLE.md and the engine's results.json."""
    found = set()
    for table in (REPO / "results").rglob("TABLE.md"):
        folder = table.parent.relative_to(REPO).as_posix()
        data = table.parent / "results.json"
        if folder.startswith(NOT_ENGINE) or not data.is_file():
            continue
        if {"settings", "results"} <= set(json.loads(data.read_text(encoding="utf-8"))):
            found.add(folder)
    return found


def test_every_engine_table_has_one_manifest_entry():
    """Each engine table is listed, or lies in the leaderboard's page folder, whose entry (its
    page) re-tabulates it."""
    entries = remake.load_manifest(MANIFEST)
    boards = [e.folder for e in entries if e.paper == remake.BOARD_PAPER]
    folders = [e.folder for e in entries if e.paper != remake.BOARD_PAPER]
    tables = [t for t in engine_tables() if not any(t.startswith(b + "/") for b in boards)]
    assert sorted(folders) == sorted(tables)


ENGINE_ENTRIES = [e for e in remake.load_manifest(MANIFEST, REPO) if e.paper != remake.BOARD_PAPER]
BOARD_ENTRIES = [e for e in remake.load_manifest(MANIFEST, REPO) if e.paper == remake.BOARD_PAPER]


@pytest.mark.parametrize("entry", BOARD_ENTRIES, ids=lambda e: e.folder)
def test_the_boards_entry_is_its_page_over_its_runs(entry):
    """The leaderboard's entry names its plan and remakes its page (which re-tabulates the
    runs' folder with the engine, training nothing); the page folder is the plan's."""
    from ran_lab.leaderboard.board import load_board

    board = load_board(REPO / entry.config)
    assert entry.argv[:3] == ["scripts/reproduce-leaderboard.sh", "page",
                              f"--board={entry.config}"]
    assert board.page == entry.folder
    assert (REPO / entry.folder / "TABLE.md").is_file()


@pytest.mark.parametrize("entry", ENGINE_ENTRIES, ids=lambda e: e.folder)
def test_manifest_command_is_the_tables(entry, capsys):
    """The engine's own parser accepts the command the entry stands for (--dry-run: its config,
    pairs, systems and seeds resolve), it trains nothing new, and it names the config, pairs,
    systems, seeds, threads and jobs the folder's results.json records."""
    argv = entry.argv
    assert "--resume" in argv
    run_paper(paper_of(argv[0]), argv[1:] + ["--dry-run"])
    assert "fairseq-generate" in capsys.readouterr().out
    settings = json.loads((REPO / entry.folder / "results.json").read_text())["settings"]
    assert entry.config == settings["config"]
    # the engine tabulates every finished run of the folder beside the command's (another pair's
    # too), so the command's pairs, systems and seeds are among the table's
    assert entry.pairs == [p for p in settings["pairs"] if p in entry.pairs]
    assert set(entry.systems) <= set(settings["systems"])
    assert set(entry.seeds) <= set(settings["seeds"])
    assert entry.threads == settings["threads"] and entry.jobs == settings["jobs"]
    config = json.loads((REPO / settings["config"]).read_text())
    while "out" not in config:
        config = json.loads((REPO / config["base"]).read_text())
    assert config["out"] == entry.folder


# ---------------------------------------------------------------------------------------------
# The check itself, on a temporary git repository
# ---------------------------------------------------------------------------------------------

STAND_IN = """\
import sys, time
from pathlib import Path
options = dict(a[2:].split("=", 1) for a in sys.argv[1:] if "=" in a)
folder, text = Path(*Path(options["config"]).parent.parts[2:]), options["systems"]
if text == "train":
    print("reproduce-x: de-en baseline seed 1 ...", file=sys.stderr, flush=True)
    time.sleep(60)
if text == "fail":
    sys.exit("reproduce-x: error: no such config")
(folder / "TABLE.md").write_text("the table\\n")
if text == "extra":
    (folder / "EXTRA.md").write_text("a new file\\n")
"""


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "table.py").write_text(STAND_IN)
    # a paper "t" whose reproduction command runs the stand-in (a manifest names nothing else)
    (tmp_path / "scripts" / "reproduce-t.sh").write_text('"$PYTHON" scripts/table.py "$@"\n')
    (tmp_path / "configs" / "t").mkdir(parents=True)
    (tmp_path / "configs" / "t" / "reproduce.json").write_text("{}\n")
    for folder in ("configs/t/results/t", "configs/t/results/t/inner"):
        (tmp_path / folder).mkdir(parents=True)
    for folder in ("results/t", "results/t/inner"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "TABLE.md").write_text("the table\n")
    write_manifest(tmp_path, "same")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "tables")
    return tmp_path


def entry(folder, text, **changed):
    """A manifest entry of the paper "t" whose stand-in writes into ``folder`` and does what
    ``text`` says (the stand-in reads them from --config and --systems)."""
    return dict({"folder": folder, "paper": "t", "config": f"configs/t/{folder}/c.json",
                 "pairs": ["de-en"], "systems": [text], "seeds": [1], "threads": 1, "jobs": 1,
                 "note": ""}, **changed)


def write_manifest(root, outer_text):
    entries = [entry("results/t", outer_text), entry("results/t/inner", "same")]
    (root / "results" / "REMAKE.json").write_text(json.dumps(entries))


def check(repo, *argv):
    """The exit status of the remake check in ``repo``."""
    try:
        status = remake.main(list(argv), repo=repo)
    except SystemExit as e:
        status = e.code
    return status


def test_unchanged_tables_pass(repo, capsys):
    assert check(repo) == 0
    out = capsys.readouterr().out
    assert "results/t: unchanged" in out and "results/t/inner: unchanged" in out


def test_an_altered_table_is_named(repo, capsys):
    (repo / "results" / "t" / "TABLE.md").write_text("an older table\n")
    git(repo, "commit", "-q", "-am", "altered")
    assert check(repo) == 1
    captured = capsys.readouterr()
    assert "results/t: DIFFERS" in captured.out and "M results/t/TABLE.md" in captured.out
    assert "results/t/inner: unchanged" in captured.out  # the inner folder is its own entry
    assert "1 of 2 folder(s) differ from git: results/t" in captured.err


def test_a_new_file_is_named(repo, capsys):
    write_manifest(repo, "extra")
    git(repo, "commit", "-q", "-am", "extra")
    assert check(repo, "--only", "results/t") == 1
    assert "?? results/t/EXTRA.md" in capsys.readouterr().out


def test_a_command_that_starts_a_run_is_stopped(repo, capsys):
    write_manifest(repo, "train")
    git(repo, "commit", "-q", "-am", "train")
    assert check(repo, "--only", "results/t") == 1
    out = capsys.readouterr().out
    assert "started a run (de-en baseline seed 1)" in out
    assert remake.load_manifest(repo / "results" / "REMAKE.json")  # still readable


def test_a_failing_command_shows_its_error(repo, capsys):
    write_manifest(repo, "fail")
    git(repo, "commit", "-q", "-am", "fail")
    assert check(repo, "--only", "results/t") == 1
    out = capsys.readouterr().out
    assert "results/t: FAILED (exit 1" in out and "error: no such config" in out


def test_uncommitted_changes_are_not_remade(repo, capsys):
    (repo / "results" / "t" / "TABLE.md").write_text("edited\n")
    assert check(repo, "--only", "results/t") == 1
    assert "not remade: it holds uncommitted changes" in capsys.readouterr().out
    assert (repo / "results" / "t" / "TABLE.md").read_text() == "edited\n"


def test_list_and_unknown_folder(repo, capsys):
    assert check(repo, "--list") == 0
    assert ("scripts/reproduce-t.sh --config=configs/t/results/t/c.json --pairs=de-en "
            "--systems=same --seeds=1 --resume --threads=1 --jobs=1") in capsys.readouterr().out
    assert "not in the manifest: results/x" in str(check(repo, "--only", "results/x"))


@pytest.mark.parametrize("text, message", [
    ('{"folder": "results/t"}', "a list of"),
    ('[{"folder": "results/t", "paper": "ran", "config": "configs/ran/cpu.json", "pairs": [], '
     '"systems": ["x"], "seeds": [1], "threads": 1, "jobs": 1}]',
     r'"\[0\]\.pairs": expected a non-empty list'),
    (json.dumps([entry("/abs", "x", paper="ran")]), "'folder' must be"),
    (json.dumps([entry("a", "x", paper="ran", config="configs/ran/cpu.json"),
                 entry("a/", "x", paper="ran", config="configs/ran/cpu.json")]), "listed twice"),
])
def test_a_malformed_manifest_is_refused(tmp_path, text, message):
    path = tmp_path / "REMAKE.json"
    path.write_text(text)
    with pytest.raises(LabError, match=message):
        remake.load_manifest(path)


# ---------------------------------------------------------------------------------------------
# The smallest table, remade byte for byte in a copy of the checkout
# ---------------------------------------------------------------------------------------------

SMALLEST = "results/ran/gpu"


# Preparing Multi30k de-en from the raw corpus (BPE on 29,000 pairs) takes minutes of CPU: the
# remake runs where RAN_TEST_PREPARE_MULTI30K=1 asks for it.
PREPARE = "RAN_TEST_PREPARE_MULTI30K"


def copy_checkout(dest):
    """The checkout's files that git tracks or would track, without what a run made (data-bin/,
    checkpoints/ and the rest are git-ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and not name.startswith(("tests/", "docs/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def test_the_smallest_table_is_remade_byte_for_byte(tmp_path, monkeypatch, capsys):
    """In a copy of the checkout without data-bin/, the remake check prepares Multi30k de-en from
    the raw corpus (its engine's first step) and writes the table again, byte for byte."""
    import corpora

    raw = corpora.multi30k_raw()
    if raw is None or os.environ.get(PREPARE) != "1":
        pytest.skip(f"needs the raw Multi30k files (MULTI30K_DIR, or ../shared/data/multi30k "
                    f"beside the checkout) and {PREPARE}=1: the remake prepares the de-en "
                    f"data-bin from them (minutes of CPU)")
    copy_checkout(tmp_path)
    assert not (tmp_path / "data-bin").exists()
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "copy")
    monkeypatch.setenv("MULTI30K_DIR", str(raw))
    monkeypatch.setenv("PYTHON", sys.executable)  # the prepare script's interpreter
    table = tmp_path / SMALLEST / "TABLE.md"
    before = table.stat().st_mtime_ns
    assert check(tmp_path, "--only", SMALLEST) == 0, capsys.readouterr().out
    assert f"{SMALLEST}: unchanged" in capsys.readouterr().out
    assert table.stat().st_mtime_ns != before  # written again, by the copy's engine
    assert (tmp_path / "data-bin" / "multi30k.de-en" / "test.raw.en").is_file()


def test_results_folders_are_named_for_what_they_hold_and_indexed():
    """Every folder named gpu* under results/ holds only runs made on a GPU (each result's
    machine in its results.json), and results/README.md links every table folder that
    REMAKE.json lists."""
    tables = [e.folder for e in remake.load_manifest(REPO / remake.MANIFEST)]
    for results in sorted((REPO / "results").rglob("results.json")):
        folder = results.parent.relative_to(REPO)
        if not any(part.startswith("gpu") for part in folder.parts[1:]):
            continue
        devices = {(r.get("machine") or {}).get("device")
                   for r in json.loads(results.read_text())["results"] if r.get("machine")}
        assert devices == {"cuda"}, f"{folder} holds runs on {sorted(map(str, devices))}"
    index = (REPO / "results" / "README.md").read_text(encoding="utf-8")
    for folder in tables:
        link = folder[len("results/"):]
        assert f"]({link}/TABLE.md)" in index, f"results/README.md does not index {folder}"


MARKER = "ran-remake-ran-foreign-code"


@pytest.mark.parametrize("changed, message", [
    ({"paper": "x"}, "not a paper of configs/"),  # a reproduction script of no paper
    ({"paper": "../t"}, "not the name of a paper"),
    ({"config": "/etc/c.json"}, "not a config of the paper"),
    ({"config": "configs/t/../../elsewhere.json"}, "not a config of the paper"),
    ({"systems": ["--help"]}, "'systems' '--help' is not the name of a system"),
    ({"systems": ["x,--dry-run"]}, "is not the name of a system"),
    ({"pairs": ["--dry-run"]}, "'pairs' '--dry-run' is not a language pair"),
])
def test_a_manifest_entry_that_cannot_remake_is_refused(repo, changed, message):
    """An entry names a paper and the values of its options: one that names another paper, a
    config outside the paper's folder, or a value the engine would take as an option (--help,
    --dry-run: the command then remakes nothing, and the folder stays as committed) is refused
    before anything runs."""
    (repo / "scripts" / "reproduce-x.sh").write_text(f"touch {MARKER}\n")
    manifest = repo / "foreign.json"
    manifest.write_text(json.dumps([entry("results/t", "same", **changed)]))
    status = check(repo, "--manifest", "foreign.json")
    assert status not in (0, None) and "nothing was run" in str(status)
    assert message in str(status)
    assert not (repo / MARKER).exists()
    with pytest.raises(LabError, match="nothing was run"):
        remake.run_command(repo, remake.Entry(**entry("results/t", "same", **changed)),
                           sys.executable, remake.Outcome("results/t"))
    assert not (repo / MARKER).exists()


@pytest.mark.parametrize("argv", [
    ["-c", f"open('{MARKER}', 'w')"], ["scripts/reproduce-t.sh", "--dry-run"],
    ["scripts/reproduce-t.sh", "--help"],
])
def test_a_manifest_entry_is_never_a_command(repo, argv):
    """A manifest of commands is refused by the manifest's schema, in one line, before anything
    runs."""
    manifest = repo / "foreign.json"
    manifest.write_text(json.dumps([{"folder": "results/t", "argv": argv, "note": ""}]))
    status = check(repo, "--manifest", "foreign.json")
    assert status not in (0, None) and "foreign.json" in str(status), status
    assert "\n" not in str(status) and not (repo / MARKER).exists()
