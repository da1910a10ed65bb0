"""Every relative link of README.md, docs/*.md, configs/gpu-plans/README.md and results/**/*.md
points at a file of the checkout, and every #anchor at a heading of its page (GitHub's anchors);
README.md and docs/ cite test files only in docs/testing.md."""
import re
from pathlib import Path

import pytest

import helpers

REPO = helpers.REPO
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
         REPO / "configs" / "gpu-plans" / "README.md", *sorted((REPO / "results").rglob("*.md"))]
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def anchors(page: Path):
    """GitHub's anchors of a page's headings: lower case, punctuation but '-' and '_' dropped,
    spaces as '-', a repeated one numbered."""
    seen, found, fenced = {}, set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in LINK.findall(text):
        if not re.match(r"[a-z]+:", target):
            yield target


def test_anchors_follow_githubs_rule(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Zeng et al. 2021 (RAN): Tables 1–3\n## `--ran-decoder-initial` (§2.2)\n"
                    "```\n# not a heading\n```\n## Notes\n## Notes\n")
    assert anchors(page) == {"zeng-et-al-2021-ran-tables-13", "--ran-decoder-initial-22",
                             "notes", "notes-1"}


def broken_links(page: Path):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    return broken


def test_a_missing_file_or_heading_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n")
    page = tmp_path / "p.md"
    page.write_text("# Top\n[a](other.md#other-page) [b](#top) [c](https://x.org/y#z)\n"
                    "[d](missing.md) [e](other.md#nowhere) [f](#gone)\n```\n[g](in-code.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file",
                                  "other.md#nowhere: no heading with that anchor in other.md",
                                  "#gone: no heading with that anchor in p.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


TEST_FILE = re.compile(r"\btests/[\w*]|\btest_\w+\.py\b|::test_\w+")


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "testing.md" and (
                                  p == REPO / "README.md" or p.is_relative_to(REPO / "docs"))],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_test_files_are_cited_only_in_the_testing_page(page):
    """A page says what is tested; which file tests it is docs/testing.md's to say, so that a
    test moved or renamed changes one page."""
    cited = TEST_FILE.findall(page.read_text(encoding="utf-8"))
    assert not cited, f"{page.relative_to(REPO)} cites test files: {cited}"
