"""Portable records (ran_lab.portable): what the engine and the benchmark write names the
checkout's files as {repo}/PATH and keeps logs without the machine's paths; the command that
rewrites files made before; and the check that no committed result or config holds an absolute
path of the machine it was made on."""
import json
import subprocess
import sys

import pytest

import helpers
from ran_lab import portable

REPO = helpers.REPO


def test_record_and_expand_turn_the_checkout_into_a_placeholder_and_back(tmp_path):
    checkout = tmp_path / "checkout"
    value = {"argv": [f"{checkout}/data-bin/x", "--user-dir", f"{checkout}/ran_fairseq",
                      f"--out={checkout}", f"{checkout}-old/x", f"/mnt{checkout}/x"],
             "n": 3, "none": None}
    recorded = portable.record(value, checkout)
    assert recorded == {"argv": ["{repo}/data-bin/x", "--user-dir", "{repo}/ran_fairseq",
                                 "--out={repo}", f"{checkout}-old/x", f"/mnt{checkout}/x"],
                        "n": 3, "none": None}
    assert portable.expand(recorded, checkout) == value
    elsewhere = tmp_path / "elsewhere"
    assert portable.expand(recorded, elsewhere)["argv"][:3] == [
        f"{elsewhere}/data-bin/x", "--user-dir", f"{elsewhere}/ran_fairseq"]
    assert portable.expand_path("{repo}/data-bin/x/test.raw.en", elsewhere) == \
        elsewhere / "data-bin" / "x" / "test.raw.en"


def test_a_result_made_before_is_upgraded_from_the_checkout_it_names():
    old = {"system": "TransF", "commands": {"train": ["/old/ck/data-bin/x", "--save-dir",
                                                      "/old/ck/checkpoints/a"]},
           "subsets": {"test": {"raw_ref": "/old/ck/data-bin/x/test.raw.en"}},
           "repo": "/old/ck"}
    new = portable.upgrade_result(old, REPO)
    assert "repo" not in new
    assert new["commands"]["train"] == ["{repo}/data-bin/x", "--save-dir", "{repo}/checkpoints/a"]
    assert new["subsets"]["test"]["raw_ref"] == "{repo}/data-bin/x/test.raw.en"
    assert portable.upgrade_result(new, REPO) == new


@pytest.mark.parametrize("line, expected", [
    ("/tmp/site/fairseq/models/x.py:553: SyntaxWarning",
     "{site-packages}/fairseq/models/x.py:553: SyntaxWarning"),
    ("/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py:6409: UserWarning",
     "{site-packages}/torch/nn/functional.py:6409: UserWarning"),
    ("/tmp/offline-gpu-site.fZcSgK/hydra/core/x.py:1", "{site-packages}/hydra/core/x.py:1"),
    ("Processing /old/ck/.venv/lib/python3.11/site-packages/x (from -r /old/ck/req.txt)",
     "Processing {site-packages}/x (from -r {repo}/req.txt)"),
    ("{'save_dir': '/old/ck/checkpoints/a', 'plasma_path': '/tmp/plasma'}",
     "{'save_dir': '{repo}/checkpoints/a', 'plasma_path': '/tmp/plasma'}"),
    ("packed /root/out/speed.tgz; /home/someone/.cache/pip", "packed ~/out/speed.tgz; ~/.cache/pip"),
    ("https://github.com/facebookresearch/fairseq/blob/main/x https://example.org/home/x",
     "https://github.com/facebookresearch/fairseq/blob/main/x https://example.org/home/x"),
    ("/old/ck-2/x /mnt/old/ck/x", "/old/ck-2/x /mnt/old/ck/x"),
])
def test_log_text_replaces_the_machine_paths_a_log_holds(line, expected):
    assert portable.log_text(line, REPO, checkouts=["/old/ck"]) == expected


def test_log_text_replaces_this_checkout_and_its_packages():
    import fairseq

    site = str(__import__("pathlib").Path(fairseq.__file__).resolve().parents[1])
    text = f"{REPO}/data-bin/x {site}/fairseq/trainer.py {REPO}"
    assert portable.log_text(text) == \
        "{repo}/data-bin/x {site-packages}/fairseq/trainer.py {repo}"
    assert portable.machine_paths(text) and not portable.machine_paths(portable.log_text(text))


def test_rewrite_log_keeps_the_sentences_of_a_generate_output(tmp_path):
    log = tmp_path / "generate.txt"
    log.write_text(f"INFO | loaded from: {REPO}/data-bin/x/test\n"
                   "S-0\tsee /root/notes and /home/me/x\n"
                   "H-0\t-0.5\tsee /root/notes and /home/me/x\n"
                   f"Generate test with beam=5: BLEU4 = 1.00 ({REPO}/x)\n")
    assert portable.rewrite_log(log, REPO)
    assert log.read_text() == ("INFO | loaded from: {repo}/data-bin/x/test\n"
                               "S-0\tsee /root/notes and /home/me/x\n"
                               "H-0\t-0.5\tsee /root/notes and /home/me/x\n"
                               "Generate test with beam=5: BLEU4 = 1.00 ({repo}/x)\n")
    assert not portable.rewrite_log(log, REPO)  # nothing more to change


def run_portable(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ran_lab.portable", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or REPO,
                          env=helpers.fairseq_env(), timeout=120)


def test_the_command_rewrites_records_made_in_another_checkout(tmp_path):
    """A folder made elsewhere (its results name that checkout in 'repo', which holds for its logs
    and bench.json too) is listed by --check, rewritten (JSON as JSON: a result's 'repo' goes, the
    formatting stays), and then passes --check; a second rewrite changes nothing. A folder without
    results is given its checkout with --checkout."""
    old = "/work/old-checkout"
    folder = tmp_path / "results" / "x"
    run = folder / "de-en" / "TransF" / "seed1"
    run.mkdir(parents=True)
    result = {"system": "TransF", "seed": 1,
              "commands": {"train": [f"{old}/data-bin/x", "--user-dir", f"{old}/ran_fairseq"]},
              "subsets": {"test": {"raw_ref": f"{old}/data-bin/x/test.raw.en"}}, "repo": old}
    (run / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (folder / "results.json").write_text(json.dumps(
        {"settings": {"data": f"{old}/data-bin/x.{{src}}-{{tgt}}"}, "results": [result]},
        indent=2) + "\n")
    (run / "train.log").write_text(f"/tmp/site/fairseq/x.py:1: Warning\nsave_dir {old}/ckpt/a\n"
                                   f"checkpoint /mnt/ckpt/a/checkpoint_last.pt\n")
    (folder / "bench.json").write_text(json.dumps({"settings": {"data": f"{old}/data-bin/x"}}))
    (run / "hyp.detok.txt").write_text("a translation\n")

    proc = run_portable("--check", folder)
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith(
        "portable: 4 of 5 files hold a machine's absolute path: rewrite them with "
        "python -m ran_lab.portable PATH...")
    proc = run_portable("--replace", "/mnt/ckpt={scratch}", folder)
    assert proc.returncode == 0, proc.stderr
    assert "portable: rewrote 4 of 5 files" in proc.stderr
    stored = json.loads((run / "result.json").read_text())
    assert stored == {"system": "TransF", "seed": 1,
                      "commands": {"train": ["{repo}/data-bin/x", "--user-dir",
                                             "{repo}/ran_fairseq"]},
                      "subsets": {"test": {"raw_ref": "{repo}/data-bin/x/test.raw.en"}}}
    assert (run / "result.json").read_text() == json.dumps(stored, indent=2) + "\n"
    report = json.loads((folder / "results.json").read_text())
    assert report["settings"]["data"] == "{repo}/data-bin/x.{src}-{tgt}"
    assert report["results"] == [stored]
    assert (run / "train.log").read_text() == ("{site-packages}/fairseq/x.py:1: Warning\n"
                                               "save_dir {repo}/ckpt/a\n"
                                               "checkpoint {scratch}/a/checkpoint_last.pt\n")
    assert json.loads((folder / "bench.json").read_text()) == \
        {"settings": {"data": "{repo}/data-bin/x"}}
    # a folder without results names no checkout: the old one is given with --checkout
    other = tmp_path / "bench"
    other.mkdir()
    (other / "bench.json").write_text(json.dumps({"settings": {"data": f"{old}/data-bin/x"}}))
    assert run_portable(other).returncode == 0
    assert "/work/old-checkout" in (other / "bench.json").read_text()
    assert run_portable("--checkout", old, other).returncode == 0
    assert (other / "bench.json").read_text() == '{"settings": {"data": "{repo}/data-bin/x"}}'
    assert run_portable("--check", folder).returncode == 0
    proc = run_portable(folder)
    assert proc.returncode == 0 and "portable: rewrote 0 of 5 files" in proc.stderr


def test_no_result_or_config_holds_an_absolute_path_of_a_machine():
    """Every file of results/ and configs/ that git keeps (or would add) names the checkout's
    files relative to it: no checkout, virtual environment, package folder, home or temporary
    folder of the machine it was made on (fairseq's own /tmp/plasma is no such path). Files
    made elsewhere are rewritten with `python -m ran_lab.portable FOLDER`."""
    files = portable.project_files([REPO / "results", REPO / "configs"])
    assert any(f.name == "result.json" for f in files) and any(f.name == "train.log" for f in files)
    found = {}
    for path in files:
        text = portable.read_text(path)
        paths = portable.machine_paths(text) if text is not None else []
        if paths:
            found[str(path.relative_to(REPO))] = paths[:3]
    assert not found, (f"{len(found)} files hold a machine's absolute path (rewrite them: "
                       f"python -m ran_lab.portable results/ configs/): "
                       f"{dict(list(found.items())[:10])}")


def test_the_check_finds_the_paths_of_the_machines_records_were_made_on():
    for text in (f"{REPO}/data-bin", "/work/main/data-bin", "/home/me/ran_fairseq/x",
                 "/root/.cache/pip", "/tmp/pytest-of-root/pytest-1/x", "'/tmp/site/fairseq/x.py'",
                 "/tmp/offline-gpu-site.AbC123/torch/x.py", "/opt/x/lib/python3.12/site-packages/y",
                 "file:///work/main"):
        assert portable.machine_paths(text), text
    for text in ("{repo}/data-bin", "'plasma_path': '/tmp/plasma'", "#!/usr/bin/env bash",
                 "https://aclanthology.org/2021.emnlp-main.258", "data-bin/multi30k.de-en",
                 "../shared/papers"):
        assert not portable.machine_paths(text), text


def test_paper_files_cite_the_paper_not_a_file():
    """configs/PAPER/paper.json's source is a citation (authors, title, venue, a URL), which the
    tables print: no path of a file on the machine that wrote it."""
    for path in sorted((REPO / "configs").glob("*/paper.json")):
        source = json.loads(path.read_text())["source"]
        assert "https://" in source, path
        assert not any(word in source for word in ("/work/", "../", "papers/", ".txt")), \
            (path, source)
