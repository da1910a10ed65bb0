"""One way to read a JSON file: every reader of the lab (a config, a paper file, a run's
result.json and its checkpoints' train_argv.json, a folder's results.json, a claims file, the
remake manifest, a benchmark's systems file, a data-bin's stamp) answers a file nested too deep, or
too large, or of the wrong shape in one line naming it, never with a traceback."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from ran_text import textio

DEEP = "[" * 100000 + "]" * 100000


def readers():
    """(file name, read(path) raising the reader's one-line error)."""
    from ran_lab import remake
    from ran_lab.bench.systems import read_systems
    from ran_lab.claims.spec import load as load_claims
    from ran_lab.reproduce import papers, store
    from ran_lab.reproduce.config import load_config
    from ran_text.prepare.stamp import _read_stamp
    from ran_text.tokenization import recorded_options

    return {
        "config": ("cpu.json", load_config),
        "paper file": ("reproduce.json", lambda p: papers.load_paper(p.parent)),
        "result.json": ("result.json", lambda p: store.read_result(SimpleNamespace(dir=p.parent))),
        "results.json": ("results.json", lambda p: store.stored_report(p.parent)),
        "train_argv.json": ("train_argv.json", lambda p: store.stored_train_argv(
            SimpleNamespace(save_dir=p.parent))),
        "claims file": ("claims.json", load_claims),
        "REMAKE.json": ("REMAKE.json", remake.load_manifest),
        "ran-bench --systems": ("systems.json", read_systems),
        "prepare-stamp.json": ("prepare-stamp.json", lambda p: _read_stamp(p.parent)),
        "prepare-stamp.json (tokenization)": ("prepare-stamp.json",
                                              lambda p: recorded_options(p.parent)),
    }


def one_line_error(read, path):
    with pytest.raises(Exception) as e:
        read(path)
    assert not isinstance(e.value, (RecursionError, MemoryError, AttributeError, TypeError,
                                    KeyError)), repr(e.value)
    text = str(e.value)
    assert str(path) in text and "\n" not in text, text
    return text


@pytest.mark.parametrize("reader", list(readers()))
def test_a_file_nested_too_deep_is_one_line(tmp_path, reader):
    name, read = readers()[reader]
    path = tmp_path / name
    path.write_text(DEEP, encoding="utf-8")
    assert "nests lists or objects more than" in one_line_error(read, path)


@pytest.mark.parametrize("text, expected", [
    ("[1, 2]", '"[0]": expected a string, found the number 1'),
    ('"fairseq-train"', "holds a string where a list belongs"),
])
def test_train_argv_json_has_a_shape(tmp_path, text, expected):
    name, read = readers()["train_argv.json"]
    (tmp_path / name).write_text(text)
    assert expected in one_line_error(read, tmp_path / name)


@pytest.mark.parametrize("text, expected", [
    ("[]", "it holds a list, not an object"),
    ('{"version": 1, "corpus": "multi30k"}', '"options" is missing'),
    ('{"version": 1, "corpus": "x", "options": {}, "splits": {}, "inputs": {}, "tools": {}, '
     '"outputs": [3]}', '"outputs" is not a list of file names'),
])
def test_a_data_bin_stamp_has_a_shape(tmp_path, text, expected):
    from ran_text.prepare.options import PrepareError
    from ran_text.prepare.stamp import _read_stamp

    (tmp_path / "prepare-stamp.json").write_text(text)
    with pytest.raises(PrepareError) as e:
        _read_stamp(tmp_path)
    assert expected in str(e.value) and "--force" in str(e.value)
    assert _read_stamp(tmp_path, force=True) is None  # a rebuild takes it as absent


def test_a_file_larger_than_any_of_the_project_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(textio, "JSON_MAX_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text("[" + ", ".join(["1"] * 1000) + "]")
    with pytest.raises(textio.BadTextFile, match="larger than"):
        textio.read_json(path, "a file")


def test_a_folder_given_as_config_is_named_a_folder(tmp_path):
    from ran_lab.reproduce.config import load_config
    from ran_lab.common import LabError

    with pytest.raises(LabError, match=f"config \\(--config\\) {tmp_path} is a folder; name a "
                                         f"JSON file"):
        load_config(tmp_path)


def test_the_depth_of_the_project_s_own_files_is_far_below_the_bound():
    repo = Path(__file__).resolve().parents[2]
    for path in [*repo.glob("configs/**/*.json"), *repo.glob("results/**/*.json")]:
        textio.read_json(path, "a file of the checkout")
