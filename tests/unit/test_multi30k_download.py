"""Where Multi30k comes from on a user's machine (ran_text.prepare.resolve_multi30k_raw):
MULTI30K_DIR, else the mirror beside the checkout, else the user cache, else a download into that
cache, each file checked against its SHA-256. The downloads come from a loopback HTTP server
serving small synthetic files whose SHA-256 the tests patch in; it counts the requests it gets."""
import functools
import gzip
import hashlib
import http.server
import socket
import threading
from pathlib import Path

import pytest

from ran_text import corpora
from ran_text import prepare as prepare_module
from ran_text.prepare import PrepareError, main, resolve_multi30k_raw

REPO = Path(__file__).resolve().parents[2]
LANGS = ("de", "en")
WORDS = {"de": "ein mann eine frau hund spielt im park sitzt auf der bank rot blau".split(),
         "en": "a man a woman dog plays in the park sits on the bench red blue".split()}


def write_corpus(d: Path, n: int = 40) -> None:
    """Line-aligned toy captions for {train,val,test_2016_flickr}.{de,en}.gz."""
    d.mkdir(parents=True, exist_ok=True)
    for name in corpora.MULTI30K_SPLITS.values():
        for lang in LANGS:
            words = WORDS[lang]
            lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 5))
                     for i in range(n)]
            with gzip.open(d / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")


class Server:
    """http.server in a thread on 127.0.0.1, serving ``root``; ``requests`` lists the paths."""

    def __init__(self, root: Path):
        self.requests = []
        requests = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/task1/raw"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A server with the toy corpus under /task1/raw, its SHA-256s patched into the package; no
    MULTI30K_* variable, and a cache under tmp_path."""
    root = tmp_path / "www"
    write_corpus(root / "task1" / "raw")
    for f in (root / "task1" / "raw").iterdir():
        monkeypatch.setitem(corpora.MULTI30K_SHA256, f.name,
                            hashlib.sha256(f.read_bytes()).hexdigest())
    for var in ("MULTI30K_DIR", "MULTI30K_DOWNLOAD", "MULTI30K_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    server = Server(root)
    yield server
    server.close()


def cache_of(tmp_path):
    return tmp_path / "xdg" / "ran_fairseq" / "multi30k"


def test_cache_hit_makes_no_request(served, tmp_path, capsys):
    write_corpus(cache_of(tmp_path))
    got = resolve_multi30k_raw(None, tmp_path / "work", LANGS, None, served.url)
    assert got == cache_of(tmp_path) and served.requests == []
    assert "from the cache" in capsys.readouterr().out


def test_installed_package_downloads_into_the_cache_and_writes_under_cwd(served, tmp_path,
                                                                          monkeypatch, capsys):
    """As an installed package (no checkout): nothing to do but run; the files are downloaded
    once into $XDG_CACHE_HOME/ran_fairseq/multi30k with a progress line each, and the data-bin
    goes to ./data-bin. A second run makes no request."""
    monkeypatch.setenv("MULTI30K_URL", served.url)
    monkeypatch.chdir(tmp_path)
    args = ["multi30k", "--src", "de", "--tgt", "en", "--bpe-merges", "30", "--workers", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"downloading Multi30k (6 files) from {served.url} into {cache_of(tmp_path)}" in out
    for name in corpora.MULTI30K_SPLITS.values():
        for lang in LANGS:
            assert f"prepare:   {name}.{lang}.gz " in out and "(100%)" in out
            assert (cache_of(tmp_path) / f"{name}.{lang}.gz").is_file()
    assert sorted(served.requests) == sorted(
        f"/task1/raw/{n}.{lang}.gz" for n in corpora.MULTI30K_SPLITS.values() for lang in LANGS)
    assert not list(cache_of(tmp_path).glob("*.part"))
    assert (tmp_path / "data-bin" / "multi30k.de-en" / "train.de-en.de.bin").is_file()
    served.requests.clear()
    assert main(args) == 0
    assert served.requests == [] and "is up to date" in capsys.readouterr().out


def test_checksum_mismatch_is_refused(served, tmp_path, monkeypatch):
    wrong = "0" * 64
    monkeypatch.setitem(corpora.MULTI30K_SHA256, "val.en.gz", wrong)
    with pytest.raises(PrepareError) as err:
        resolve_multi30k_raw(None, tmp_path / "work", LANGS, None, served.url)
    msg = str(err.value)
    actual = hashlib.sha256((tmp_path / "www/task1/raw/val.en.gz").read_bytes()).hexdigest()
    assert "val.en.gz" in msg and wrong in msg and actual in msg
    assert "deleted" in msg and "MULTI30K_URL" in msg and "MULTI30K_DIR" in msg
    assert not (cache_of(tmp_path) / "val.en.gz").exists()
    assert not (cache_of(tmp_path) / "val.en.gz.part").exists()


def test_unreachable_server_names_multi30k_dir_and_the_url(served, tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/task1/raw"
    monkeypatch.setenv("MULTI30K_URL", url)
    with pytest.raises(PrepareError) as err:
        resolve_multi30k_raw(None, tmp_path / "work", LANGS)
    msg = str(err.value)
    assert "MULTI30K_DIR" in msg and url in msg and "MULTI30K_URL" in msg
    assert not list(cache_of(tmp_path).glob("*.gz*"))


def test_download_forbidden_names_multi30k_dir_and_the_url(served, tmp_path, monkeypatch,
                                                           capsys):
    monkeypatch.setenv("MULTI30K_DOWNLOAD", "0")
    monkeypatch.setenv("MULTI30K_URL", served.url)
    assert main(["multi30k", "--src", "de", "--tgt", "en", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "MULTI30K_DIR" in err and served.url in err and "MULTI30K_DOWNLOAD=0" in err
    assert served.requests == []


def test_home_cache_without_xdg(served, tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    got = resolve_multi30k_raw(None, tmp_path / "work", LANGS, None, served.url)
    assert got == tmp_path / "home" / ".cache" / "ran_fairseq" / "multi30k"
    assert (got / "train.de.gz").is_file() and len(served.requests) == 6


def test_multi30k_url_overrides_the_published_url(served, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MULTI30K_URL", served.url + "/")
    assert corpora.multi30k_url() == served.url
    got = resolve_multi30k_raw(None, tmp_path / "work", LANGS)
    assert got == cache_of(tmp_path) and len(served.requests) == 6
    assert corpora.MULTI30K_URL not in capsys.readouterr().out


def test_named_folder_comes_first(served, tmp_path, monkeypatch):
    """MULTI30K_DIR (or --raw-dir) wins over the cache; a named folder without the files is an
    error naming it, unless --download fills the cache."""
    named = tmp_path / "named"
    write_corpus(named)
    assert resolve_multi30k_raw(named, tmp_path / "w", LANGS, None, served.url) == named
    with pytest.raises(PrepareError, match="MULTI30K_DIR") as err:
        resolve_multi30k_raw(tmp_path / "empty", tmp_path / "w", LANGS, None, served.url)
    assert str(tmp_path / "empty") in str(err.value) and served.requests == []
    got = resolve_multi30k_raw(tmp_path / "empty", tmp_path / "w", LANGS, True, served.url)
    assert got == cache_of(tmp_path) and len(served.requests) == 6


def test_data_bins_go_under_the_working_folder(monkeypatch, tmp_path):
    """ran-prepare writes ./data-bin wherever it runs (the checkout's scripts run it in the
    checkout); it knows nothing of the lab's mirror, which the lab names in MULTI30K_DIR."""
    monkeypatch.chdir(tmp_path)
    assert prepare_module.data_bin_root() == tmp_path / "data-bin"
    assert not hasattr(prepare_module, "multi30k_mirror")


def test_the_lab_names_its_mirror_in_multi30k_dir(monkeypatch, tmp_path):
    from ran_lab.common import paths

    monkeypatch.setattr(paths, "MULTI30K_MIRROR", tmp_path)
    assert paths.multi30k_environment({})["MULTI30K_DIR"] == str(tmp_path)
    assert paths.multi30k_environment({"MULTI30K_DIR": "/elsewhere"}) == {
        "MULTI30K_DIR": "/elsewhere"}
    monkeypatch.setattr(paths, "MULTI30K_MIRROR", tmp_path / "absent")
    assert "MULTI30K_DIR" not in paths.multi30k_environment({})


def test_recorded_checksums_match_the_mirror():
    """The SHA-256s in the package are those of the published files (the mirror's copies)."""
    mirror = REPO.parent / "shared" / "data" / "multi30k"
    files = sorted(mirror.glob("*.gz"))
    if not files:
        pytest.skip(f"no Multi30k mirror at {mirror}")
    assert {f.name for f in files} <= set(corpora.MULTI30K_SHA256)
    for f in files:
        assert hashlib.sha256(f.read_bytes()).hexdigest() == corpora.MULTI30K_SHA256[f.name], f
