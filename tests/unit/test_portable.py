"""Portable records and logs: what the engine and the benchmark write names the checkout's files
relative to it, and keeps logs without the machine's paths (ran_lab.portable); and the check that
no committed result or config holds an absolute path of the machine it was made on."""
import io
import json
import re
import subprocess
import sys

import pytest

import helpers
from ran_lab import portable

REPO = helpers.REPO


def test_a_record_names_the_checkouts_files_relative_to_it_and_others_by_their_path(
        tmp_path, monkeypatch):
    """A path is recorded as ``shown`` writes it, and opened where ``repo_path`` finds it: the
    checkout's files relative to it (the same record in any checkout), others absolute."""
    from ran_lab.common import paths

    checkout = tmp_path / "checkout"
    monkeypatch.setattr(paths, "REPO", checkout)
    recorded = [paths.shown(p) for p in (checkout / "data-bin" / "x", checkout / "ran_fairseq",
                                         tmp_path / "checkout-old" / "x")]
    assert recorded == ["data-bin/x", "ran_fairseq", f"{tmp_path}/checkout-old/x"]
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setattr(paths, "REPO", elsewhere)
    assert [paths.repo_path(p) for p in recorded] == [
        elsewhere / "data-bin" / "x", elsewhere / "ran_fairseq", tmp_path / "checkout-old" / "x"]


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
    assert portable.log_text(line, "/old/ck") == expected


def test_log_text_replaces_this_checkout_and_its_packages():
    import fairseq

    site = str(__import__("pathlib").Path(fairseq.__file__).resolve().parents[1])
    text = f"{REPO}/data-bin/x {site}/fairseq/trainer.py {REPO}"
    assert portable.log_text(text) == \
        "{repo}/data-bin/x {site-packages}/fairseq/trainer.py {repo}"
    assert machine_paths(text) and not machine_paths(portable.log_text(text))


def test_a_log_is_kept_with_the_sentences_of_a_generate_output_as_they_are():
    text = (f"INFO | loaded from: {REPO}/data-bin/x/test\n"
            "S-0\tsee /root/notes and /home/me/x\n"
            "H-0\t-0.5\tsee /root/notes and /home/me/x\n"
            f"Generate test with beam=5: BLEU4 = 1.00 ({REPO}/x)\n")
    kept = ("INFO | loaded from: {repo}/data-bin/x/test\n"
            "S-0\tsee /root/notes and /home/me/x\n"
            "H-0\t-0.5\tsee /root/notes and /home/me/x\n"
            "Generate test with beam=5: BLEU4 = 1.00 ({repo}/x)\n")
    assert portable.kept_log(text) == kept
    log = io.StringIO()
    portable.copy_log(io.StringIO(text), log)
    assert log.getvalue() == kept


def test_the_filter_keeps_a_commands_log_portable_as_it_is_written():
    """`COMMAND 2>&1 | python -m ran_lab.portable > LOG` (scripts/gpu-speed.sh's bench.log): each
    line as kept_log keeps it, a sentence line as it is."""
    text = f"INFO | loaded from: {REPO}/data-bin/x/test\nS-0\tsee /root/notes\n"
    proc = subprocess.run([sys.executable, "-m", "ran_lab.portable"], input=text,
                          capture_output=True, text=True, cwd=REPO, env=helpers.fairseq_env(),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "INFO | loaded from: {repo}/data-bin/x/test\nS-0\tsee /root/notes\n"


# The beginnings of the absolute paths records were found to hold (checkouts, virtual
# environments, temporary package folders, home folders), besides this checkout and Python's
# package folders; fairseq's own /tmp/plasma is no machine's path.
MACHINE_PREFIXES = ("/work/", "/home/", "/root/", "/Users/", "/tmp/pytest", "/tmp/offline-gpu-site",
                    "/tmp/site/", "/scratch/", "/mnt/", "/private/")


def machine_paths(text):
    """The machine paths in ``text`` (each from its start to the end of the word)."""
    exact = sorted({str(REPO), *portable.site_dirs(), str(__import__("pathlib").Path(
        sys.prefix).resolve())}, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.+~}-])(?:" + "|".join(re.escape(p) for p in exact) + r"(?![\w.+~-])|"
                         + "|".join(re.escape(p) for p in MACHINE_PREFIXES)
                         + r"|/\S*?/(?:site|dist)-packages(?![\w.+~-]))")
    return sorted(set(re.findall(pattern.pattern + r"[^\s'\"(),:;=\[\]{}<>|`*?]*", text)))


def committed_files(*folders):
    """The text files of ``folders`` that git keeps or would add."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                            *folders], cwd=REPO, capture_output=True, check=True).stdout
    files = [REPO / name for name in names.decode().split("\0") if name]
    return [f for f in files if f.is_file() and b"\0" not in f.read_bytes()[:8192]]


def test_no_result_or_config_holds_an_absolute_path_of_a_machine():
    """Every file of results/ and configs/ that git keeps (or would add) names the checkout's
    files relative to it: no checkout, virtual environment, package folder, home or temporary
    folder of the machine it was made on (fairseq's own /tmp/plasma is no such path)."""
    files = committed_files("results", "configs")
    assert any(f.name == "result.json" for f in files) and any(f.name == "train.log" for f in files)
    found = {}
    for path in files:
        paths = machine_paths(path.read_text(encoding="utf-8", errors="replace"))
        if paths:
            found[str(path.relative_to(REPO))] = paths[:3]
    assert not found, (f"{len(found)} files hold a machine's absolute path (write it as "
                       f"relative to the checkout): {dict(list(found.items())[:10])}")


def test_the_check_finds_the_paths_of_the_machines_records_were_made_on():
    for text in (f"{REPO}/data-bin", "/work/main/data-bin", "/home/me/ran_fairseq/x",
                 "/root/.cache/pip", "/tmp/pytest-of-root/pytest-1/x", "'/tmp/site/fairseq/x.py'",
                 "/tmp/offline-gpu-site.AbC123/torch/x.py", "/opt/x/lib/python3.12/site-packages/y",
                 "file:///work/main"):
        assert machine_paths(text), text
    for text in ("{repo}/data-bin", "'plasma_path': '/tmp/plasma'", "#!/usr/bin/env bash",
                 "https://aclanthology.org/2021.emnlp-main.258", "data-bin/multi30k.de-en",
                 "../shared/papers"):
        assert not machine_paths(text), text


def test_paper_files_cite_the_paper_not_a_file():
    """configs/PAPER/paper.json's source is a citation (authors, title, venue, a URL), which the
    tables print: no path of a file on the machine that wrote it."""
    for path in sorted((REPO / "configs").glob("*/paper.json")):
        source = json.loads(path.read_text())["source"]
        assert "https://" in source, path
        assert not any(word in source for word in ("/work/", "../", "papers/", ".txt")), \
            (path, source)
