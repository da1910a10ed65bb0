"""The lab's files declare, the code decides what runs: a config's "prepare" names a corpus of
the engine's registry with typed parameters, a system's "postprocess" a step, a paper file its
measure and computed columns; none of them names a program, a module or an import path, and a
name outside a registry (or a command, as files held before) is one line listing the names."""
import json
import shutil
import sys
from pathlib import Path

import pytest

from ran_lab.reproduce import papers, preparations
from ran_lab.reproduce.config import load_config, load_systems
from ran_lab.common import LabError

REPO = Path(__file__).resolve().parents[2]
MARKER = "declared-steps-ran-code"


def config_with(tmp_path, **changed):
    """configs/ran/cpu.json with ``changed`` keys, written under ``tmp_path``."""
    config = json.loads((REPO / "configs" / "ran" / "cpu.json").read_text(encoding="utf-8"))
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(dict(config, **changed)), encoding="utf-8")
    return path


def one_line(error):
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("prepare, expected", [
    (["/bin/sh", "-c", f"touch {MARKER}"], '"prepare" names a corpus of the engine and its '
                                           'parameters, not a command'),
    (["ran-prepare", "multi30k", "--src", "{src}", "--tgt", "{tgt}"], "not a command"),
    ({"corpus": "wmt99"}, "is not a corpus of the engine; the corpora: multi30k, files, "),
    ({"corpus": "multi30k", "bpe_merges": "10000"}, '"bpe_merges": expected an integer'),
    ({"corpus": "multi30k", "script": "/bin/sh"}, '"script": expected no such key'),
    ({"corpus": "multi30k", "out": "data-bin/{cmd}"}, "placeholder other than {src} and {tgt}"),
    ("scripts/prepare-wmt14-en-de.sh", "expected null or an object naming a corpus"),
], ids=["shell", "old-argv", "unknown-corpus", "wrong-type", "unknown-key", "placeholder",
        "a-string"])
def test_a_config_prepares_only_a_corpus_of_the_registry(tmp_path, monkeypatch, prepare,
                                                         expected):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LabError) as e:
        load_config(config_with(tmp_path, prepare=prepare))
    assert expected in one_line(e)
    assert not (tmp_path / MARKER).exists()


def test_a_corpus_is_prepared_by_the_code_that_its_entry_names():
    wmt = preparations.check({"corpus": "wmt17-en-tr", "bpe_merges": 32000, "clean_ratio": 0,
                              "joined_dictionary": False}, "c.json")
    assert preparations.command(wmt, "en", "tr") == (
        "scripts/prepare-wmt-en-tr.sh",
        ["2017", "en", "tr", "--bpe-merges", "32000", "--clean-ratio", "0",
         "--no-joined-dictionary"])
    here = preparations.check({"corpus": "multi30k", "out": "data-bin/w.{src}-{tgt}"}, "c.json")
    assert preparations.command(here, "de", "en") == (
        None, ["multi30k", "--src", "de", "--tgt", "en", "--out", "data-bin/w.de-en"])
    files = preparations.check({"corpus": "files", "train": "raw/train", "valid": "raw/valid",
                                "test": "raw/test", "bpe_merges": 0}, "c.json")
    assert preparations.command(files, "de", "en")[1][5:] == [
        "--train-prefix", "raw/train", "--valid-prefix", "raw/valid", "--test-prefix",
        "raw/test", "--bpe-merges", "0"]
    with pytest.raises(LabError, match='"train": expected a non-empty string'):
        preparations.check({"corpus": "files", "valid": "v", "test": "t"}, "c.json")


def systems_with(tmp_path, postprocess):
    spec = {"baseline": "a", "systems": [
        {"name": "a", "arch": "ran_transformer"},
        {"name": "b", "arch": "ran_transformer", "checkpoint_of": "a",
         "postprocess": postprocess}]}
    path = tmp_path / "systems.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


@pytest.mark.parametrize("postprocess, expected", [
    (["timeit", "-n", "1", f"open('{MARKER}', 'w')"], '"postprocess" names a step of the '
                                                      'engine, not a module and its arguments'),
    ("timeit", '"timeit" is not a step of the engine; the steps: replace_unk'),
    ({"step": "replace_unk", "method": "eval"}, '"method": expected one of "copy", '
                                                '"dictionary"'),
    ({"step": "replace_unk", "argv": ["x"]}, '"argv": expected no such key'),
    (7, "expected a step's name or an object naming one"),
])
def test_a_system_postprocesses_only_with_a_step_of_the_registry(tmp_path, postprocess,
                                                                 expected):
    with pytest.raises(LabError) as e:
        load_systems(systems_with(tmp_path, postprocess))
    assert expected in one_line(e)


def test_a_declared_step_makes_the_command_the_run_records(tmp_path):
    """The committed runs recorded replace_unk's arguments as their systems files once listed
    them: the step makes the same argv, so their stored results still match."""
    _, systems = load_systems(systems_with(tmp_path, {"step": "replace_unk",
                                                      "method": "dictionary"}))
    assert systems["b"]["postprocess"] == [
        "ran_text.replace_unk", "--method", "dictionary", "--data", "{data}", "--src", "{src}",
        "--tgt", "{tgt}", "--generate-output", "{generate}", "--source",
        "{data}/{subset}.tok.{src}", "--output", "{output}"]
    _, systems = load_systems(systems_with(tmp_path, "replace_unk"))
    assert systems["b"]["postprocess"] == [
        "ran_text.replace_unk", "--generate-output", "{generate}", "--source",
        "{data}/{subset}.tok.{src}", "--output", "{output}"]


def paper_folder(tmp_path, **changed):
    folder = tmp_path / "pervasive"
    shutil.copytree(REPO / "configs" / "pervasive", folder)
    spec = json.loads((folder / "reproduce.json").read_text(encoding="utf-8"))
    (folder / "reproduce.json").write_text(json.dumps(dict(spec, **changed)), encoding="utf-8")
    return folder


def test_a_paper_file_imports_nothing_by_its_name(tmp_path):
    """The probe: "measure": "ran_lab.gpucheck.__main__:main" ran the GPU check on import."""
    sys.modules.pop("ran_lab.gpucheck.__main__", None)
    for i, changed in enumerate(({"measure": "ran_lab.gpucheck.__main__:main"},
                    {"columns": [{"title": "x", "compute": "ran_lab.gpucheck.__main__:main"}]})):
        with pytest.raises(LabError) as e:
            papers.load_paper(paper_folder(tmp_path / str(i), **changed))
        assert "is not a" in one_line(e) and "never a module" in one_line(e)
    assert "ran_lab.gpucheck.__main__" not in sys.modules
    with pytest.raises(LabError) as e:
        papers.load_paper(paper_folder(tmp_path / "u", measure="flops"))
    assert "'measure' 'flops' is not a measure of the engine; write one of: pervasive" \
        in one_line(e)
    assert papers.load_paper(paper_folder(tmp_path / "ok")).measure.__name__ == \
        "pervasive_measure"


@pytest.mark.parametrize("broken", ["{", "[" * 100000, '{"title": 5}', "[]"],
                         ids=["cut-short", "deep", "wrong-type", "a-list"])
def test_one_broken_paper_file_is_one_line_and_the_others_run(tmp_path, broken):
    configs = tmp_path / "configs"
    for key in ("ran", "dynmem"):
        shutil.copytree(REPO / "configs" / key, configs / key)
    (configs / "dynmem" / "reproduce.json").write_text(broken, encoding="utf-8")
    found = papers.Papers(configs)
    assert list(found) == ["dynmem", "ran"]
    assert found["ran"].key == "ran"
    with pytest.raises(LabError) as e:
        found["dynmem"]
    assert str(configs / "dynmem" / "reproduce.json") in one_line(e)
    assert papers.load_old_names(configs) == papers.load_old_names(configs)  # no traceback


def test_no_file_of_the_checkout_names_a_program_or_a_module():
    """What `git grep` would find: an argv-style "prepare" or "postprocess", a paper's measure
    naming a module, a remake entry with a command."""
    for path in sorted((REPO / "configs").glob("*/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            continue
        assert not isinstance(data.get("prepare"), list), path
        for system in data.get("systems", []) if isinstance(data.get("systems"), list) else []:
            assert not isinstance(system.get("postprocess"), list), (path, system["name"])
        for value in (data.get("measure"), *[c.get("compute") for c in data.get("columns", [])
                                             if isinstance(c, dict)]):
            assert not (isinstance(value, str) and ":" in value), path
    for entry in json.loads((REPO / "results" / "REMAKE.json").read_text(encoding="utf-8")):
        assert "argv" not in entry and "paper" in entry


def test_ran_reproduce_runs_a_paper_beside_a_broken_one(tmp_path, monkeypatch, capsys):
    """The probe: a bad configs/*/reproduce.json broke every paper's ran-reproduce with a
    traceback (the papers were all read when the module was imported)."""
    from ran_lab.reproduce import cli

    configs = tmp_path / "configs"
    for key in ("ran", "dynmem"):
        shutil.copytree(REPO / "configs" / key, configs / key)
    (configs / "dynmem" / "reproduce.json").write_text("{", encoding="utf-8")
    monkeypatch.setattr(papers, "PAPERS", papers.Papers(configs))
    with pytest.raises(SystemExit) as e:
        cli.main(["dynmem", "--dry-run"])
    assert str(e.value.code).startswith("ran-reproduce: error: ") and "\n" not in str(e.value.code)
    assert str(configs / "dynmem" / "reproduce.json") in str(e.value.code)
    cli.main(["ran", "--pairs", "de-en", "--systems", "TransF", "--dry-run"])
    assert "fairseq-train" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "dynmem           (broken: " in capsys.readouterr().out
