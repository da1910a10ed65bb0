"""``ran-claims`` (or ``scripts/claims.py``): write CLAIMS.md for results folders, and fill the
pages that quote them.

    ran-claims --results results/ran/long          # one folder (its paper's claims)
    ran-claims --all                               # every folder with a results.json
    ran-claims --all --fill README.md docs/results.md
    ran-claims --all --fill README.md docs/results.md --check   # change nothing
    ran-claims --all --recheck 54321 > results/SIGNIFICANCE.md  # near p, redrawn
"""
import argparse
import sys
from pathlib import Path

from ran_lab import checkout
from ran_lab.common import LabError
from . import REPO, claims_file_of, compute, holds_of, render, verdicts_by_key
from . import report, write_claims
from ran_text.textio import one_line_errors


def folders_with_claims(repo: Path):
    """Every results folder whose paper has a claims file, in path order."""
    found = []
    for results in sorted((repo / "results").rglob("results.json")):
        if claims_file_of(results.parent, repo).is_file():
            found.append(results.parent)
    return found


def parse_refs(items):
    refs = {}
    for item in items or []:
        key, sep, path = item.partition("=")
        pair, sep2, subset = key.partition(":")
        if not (sep and sep2 and pair and subset and path):
            raise SystemExit(f"ran-claims: --refs takes PAIR:SUBSET=FILE, not {item!r}")
        refs[(pair, subset)] = path
    return refs


def parser():
    p = argparse.ArgumentParser(prog="ran-claims", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", action="append", type=Path, default=[],
                   help="a results folder (with results.json); repeat for several")
    p.add_argument("--all", action="store_true",
                   help="every folder under results/ whose paper has a configs/PAPER/claims.json")
    p.add_argument("--config", type=Path,
                   help="the claims file (default: claims.json beside the paper file that "
                        "results.json names)")
    p.add_argument("--refs", action="append", metavar="PAIR:SUBSET=FILE",
                   help="raw references for a pair and subset, where results.json's path is not "
                        "on this machine (needed only for p-values CLAIMS.json does not hold)")
    p.add_argument("--fill", nargs="+", type=Path, default=[], metavar="PAGE",
                   help="rewrite the claim spans and claims tables of these pages")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 where a CLAIMS.md or a page differs from what the "
                        "engine computes (no p-value is computed: CLAIMS.json must hold them)")
    p.add_argument("--recheck", type=int, metavar="SEED",
                   help="write nothing; test again, under bootstrap seed SEED, every test with "
                        "0.005 < p < 0.02, and print (Markdown) each test and each verdict "
                        "that changes; exit 1 where a verdict changes")
    return p


def _recheck(folders, seed, refs):
    from .recheck import markdown, recheck
    done = [recheck(folder, seed, refs, REPO) for folder in folders]
    print(markdown(done), end="")
    return any(r.changed for r in done)


@one_line_errors("ran-claims")
def main(argv=None):
    args = parser().parse_args(argv)  # --help prints without a checkout
    checkout.require("ran-claims")
    folders = [f.resolve() for f in args.results]
    if args.all:
        folders += [f for f in folders_with_claims(REPO) if f not in folders]
    if not folders and not args.fill:
        parser().error("name --results FOLDER, --all or --fill PAGE")
    refs, stale = parse_refs(args.refs), []
    try:
        if args.recheck is not None:
            sys.exit(1 if _recheck(folders, args.recheck, refs) else 0)
        for folder in folders:
            if args.check:
                claims, results, verdicts = compute(folder, args.config, refs, REPO,
                                                    compute_missing=False)
                text, _ = render(claims, results, verdicts, REPO)
                page = folder / "CLAIMS.md"
                if not page.is_file() or page.read_text(encoding="utf-8") != text:
                    stale.append(str(page))
            else:
                claims_file = args.config or claims_file_of(folder, REPO)
                print(write_claims(claims_file, folder, refs, REPO))
        cache = {}

        def verdicts_of(name):
            if name not in cache:
                cache[name] = verdicts_by_key(name, REPO)
            return cache[name]

        for page in args.fill:
            text = page.read_text(encoding="utf-8")
            filled = report.fill(text, verdicts_of, lambda name: holds_of(name, REPO))
            if filled != text:
                if args.check:
                    stale.append(str(page))
                else:
                    page.write_text(filled, encoding="utf-8")
                    print(page)
    except (LabError, KeyError) as e:
        sys.exit(f"ran-claims: error: {e}")
    if stale:
        sys.exit("claims: not what the engine computes (rerun without --check): " +
                 ", ".join(stale))


if __name__ == "__main__":  # python -m ran_lab.claims.cli: as its console script
    main()
