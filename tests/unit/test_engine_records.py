"""A run's record is bound to where it lives and what it was made from: a result.json whose
pair, system or seed is not its folder's is refused naming both; a table with a run twice is
refused by the engine and by ran-claims; each score records the SHA-256 of its hypotheses, its
references and the data-bin's recipe, and --resume refuses a changed one naming the file (--rescore
scores the run against it on purpose). The engine runs in-process with a stand-in for fairseq."""
import json

import pytest

from test_engine import FakeFairseq, argv, data, engine  # noqa: F401  (data: a fixture)


def run_dir(tmp_path, system="RAN-ALL"):
    return tmp_path / "out" / "de-en" / system / "seed1"


def edit_result(path, **changed):
    result = json.loads(path.read_text())
    path.write_text(json.dumps(dict(result, **changed), indent=2))


@pytest.mark.parametrize("changed, says", [
    ({"system": "TransF"}, "de-en/TransF/seed1"),
    ({"seed": 2}, "de-en/RAN-ALL/seed2"),
    ({"pair": "en-de"}, "en-de/RAN-ALL/seed1"),
])
def test_a_result_that_names_another_run_is_refused(tmp_path, data, changed, says):  # noqa: F811
    """The probe: RAN-ALL's result edited to say TransF moved its row (RAN-ALL's gone, TransF's
    mean taken over both)."""
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    table = (tmp_path / "out" / "results.json").read_text()
    path = run_dir(tmp_path) / "result.json"
    edit_result(path, **changed)
    message = str(engine(argv(tmp_path, data, "--resume"), FakeFairseq()))
    assert f"{path} says it is the run {says} but lies in de-en/RAN-ALL/seed1" in message
    assert "\n" not in message and (tmp_path / "out" / "results.json").read_text() == table


def duplicated_table(tmp_path, data):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    path = tmp_path / "out" / "results.json"
    report = json.loads(path.read_text())
    report["results"].append(dict(report["results"][0]))
    path.write_text(json.dumps(report, indent=2))
    return path


def test_a_table_with_a_run_twice_is_refused(tmp_path, data):  # noqa: F811
    path = duplicated_table(tmp_path, data)
    message = str(engine(argv(tmp_path, data, "--resume"), FakeFairseq()))
    assert f"{path}" in message and "each (pair, system, seed) once: de-en TransF 1 is also " \
        "results[0]" in message, message


def test_ran_claims_refuses_a_table_with_a_run_twice(tmp_path, data):  # noqa: F811
    from ran_lab.claims.cli import main as claims

    path = duplicated_table(tmp_path, data)
    with pytest.raises(SystemExit) as e:
        claims(["--results", str(path.parent)])
    assert str(e.value.code).startswith("ran-claims: error:")
    assert "each (pair, system, seed) once" in str(e.value.code), e.value.code


def test_each_score_records_the_sha256_of_its_inputs(tmp_path, data):  # noqa: F811
    import hashlib

    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    result = json.loads((run_dir(tmp_path) / "result.json").read_text())
    digests = result["subsets"]["test"]["sha256"]
    folder = data.format(src="de", tgt="en")
    for name, path in (("hyps", run_dir(tmp_path) / "hyp.detok.txt"),
                       ("refs", f"{folder}/test.raw.en"), ("tok_refs", f"{folder}/test.tok.en")):
        assert digests[name] == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert digests["data_bin"] is None  # a data-bin without a stamp (given with --data)


def test_a_reference_changed_under_the_same_path_is_refused_then_rescored(tmp_path, data):  # noqa: F811
    """The probe: --resume silently rescored against the new references (result.json rewritten,
    exit 0), its tokenized BLEU still from the old ones."""
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    path = run_dir(tmp_path, "TransF") / "result.json"
    before = path.read_text()
    folder = data.format(src="de", tgt="en")
    for name in ("test.raw.en", "test.tok.en"):
        refs = open(f"{folder}/{name}").read().splitlines()
        open(f"{folder}/{name}", "w").write("".join(r + " extra\n" for r in refs))
    message = str(engine(argv(tmp_path, data, "--resume"), FakeFairseq()))
    assert f"{folder}/test.raw.en (the references of de-en TransF seed 1, test) changed since " \
           f"the run was scored" in message and "--rescore" in message and "\n" not in message
    assert path.read_text() == before
    assert engine(argv(tmp_path, data, "--resume", "--rescore"), FakeFairseq()) == 0
    after = json.loads(path.read_text())
    assert after["sacrebleu"] < 100.0 and after["tok_bleu"] < 100.0  # both from the new files
    assert after["subsets"]["test"]["sha256"] != json.loads(before)["subsets"]["test"]["sha256"]
    assert engine(argv(tmp_path, data, "--resume"), FakeFairseq()) == 0  # now it stands


def test_a_data_bin_made_another_way_is_refused(tmp_path, data):  # noqa: F811
    folder = data.format(src="de", tgt="en")
    stamp = {"version": 1, "corpus": "multi30k", "options": {"src": "de", "tgt": "en",
                                                              "bpe_merges": 10000},
             "splits": {}, "inputs": {}, "tools": {}}
    open(f"{folder}/prepare-stamp.json", "w").write(json.dumps(stamp))
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    stamp["options"]["bpe_merges"] = 0
    open(f"{folder}/prepare-stamp.json", "w").write(json.dumps(stamp))
    message = str(engine(argv(tmp_path, data, "--resume"), FakeFairseq()))
    assert f"{folder}/prepare-stamp.json (the data-bin's recipe of de-en" in message, message


def test_a_result_made_before_the_sha256_were_recorded_gains_them(tmp_path, data):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    path = run_dir(tmp_path) / "result.json"
    result = json.loads(path.read_text())
    del result["subsets"]["test"]["sha256"]
    path.write_text(json.dumps(result, indent=2))
    assert engine(argv(tmp_path, data, "--resume"), FakeFairseq()) == 0
    assert "sha256" in json.loads(path.read_text())["subsets"]["test"]


def test_rescore_needs_resume(tmp_path, data, capsys):  # noqa: F811
    assert engine(argv(tmp_path, data, "--rescore"), FakeFairseq()) == 2
    assert "--rescore scores finished runs again: give it with --resume" in capsys.readouterr().err
