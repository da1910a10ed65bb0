"""The authors' released code the peer benchmark measures: where to get it, the commit, and the
one-line answer where a clone is missing (shared by the benchmark and its worker processes)."""
import subprocess
from pathlib import Path

from ran_lab.common import LabError


# The authors' released code, by side: where to get it, the commit measured, and a file that only
# that commit's tree has where the code is read.
PEERS = {
    "attn2d": {
        "paper": "Elbayad et al. 2018 (Pervasive Attention)",
        "url": "https://github.com/elbayadm/attn2d",
        "commit": "4cdc2237a712f3d000cd6c5f19af65fb97625479",
        "marker": "nmt/models/densenet.py",
        "note": "the paper's code (nmt/, 2018-08-10), in the history of the repository's master "
                "branch, whose tip is a later fairseq fork",
    },
    "attn2d-fairseq": {
        "paper": "Elbayad et al. 2018 (Pervasive Attention), ported to fairseq",
        "url": "https://github.com/elbayadm/attn2d",
        "commit": "982653439dedc7306e484e00b3dfb90e2cd7c9e1",
        "marker": "examples/pervasive/modules/archive/densenet.py",
        "note": "the authors' fairseq port (examples/pervasive, 2021-05-08, the master branch's "
                "tip): its batch-normalized DenseNet (modules/archive/densenet.py) and its max "
                "aggregator (modules/aggregators.py)",
    },
    "thseq": {
        "paper": "Zeng et al. 2021 (Recurrent Attention)",
        "url": "https://github.com/lemon0830/RAN",
        "commit": "6c7fd11d9a384b81d02923a0da08e23c8441dfee",
        "marker": "code_RAN/thseq/models/transformer/model.py",
        "note": "the code released with the paper, the thseq toolkit in code_RAN/; RAN-ALL is its "
                "transformer with --enc-att-type recrand --dec-att-type recrand",
    },
}

def clone_problem(peer, clone):
    """None when ``clone`` holds the peer's code at a tree that has its marker file, else the one
    line that says how to get it."""
    spec = PEERS[peer]
    how = (f"git clone {spec['url']} {clone or 'DIR'} && git -C {clone or 'DIR'} checkout "
           f"{spec['commit']}")
    if not clone:
        return f"{peer}: no clone of {spec['paper']}'s code given; get it with: {how}"
    if not (Path(clone) / spec["marker"]).is_file():
        return (f"{peer}: {clone} has no {spec['marker']} ({spec['note']}); get it with: {how}")
    return None


def require_clone(peer, clone):
    problem = clone_problem(peer, clone)
    if problem:
        raise LabError(problem)


def clone_commit(clone):
    """The commit a clone has checked out (None where the clone is not the top of a git working
    tree: a copy of the files, or a folder inside another repository)."""
    git = subprocess.run(["git", "-C", str(clone), "rev-parse", "--show-toplevel", "HEAD"],
                         capture_output=True, text=True)
    lines = git.stdout.splitlines()
    if git.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != Path(clone).resolve():
        return None
    return lines[1]
