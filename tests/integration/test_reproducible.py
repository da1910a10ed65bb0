"""What makes a rerun the same run: every result records the code commit it ran, and on CPU, with
one thread per process, the same seed, code, torch and data give the same bytes, whether the run
trains alone or beside another (docs/reproducing.md, "Reruns")."""
import hashlib
import subprocess
import threading

import torch

import helpers
from systems import TINY_RAN
from ran_lab.common import machine


def test_a_run_records_the_code_commit_it_ran():
    info = machine.machine_info("cpu", 1)
    head = subprocess.run(["git", "-C", str(helpers.REPO), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    assert info["git_commit"] == (head.stdout.strip() if head.returncode == 0 else None)


def weights_digest(checkpoint):
    """A digest of the model's parameters: the bytes of every tensor, in name order."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def train_and_decode(data_bin, save, results, key, decode=True):
    args = helpers.train_args(data_bin, save, "ran_transformer", TINY_RAN, max_update=6)
    helpers.run_cli("train", args, fresh=True)  # a new interpreter, one thread (fairseq_env)
    if not decode:
        results[key] = (weights_digest(save / "checkpoint_last.pt"), None)
        return
    out = helpers.run_cli("generate", [data_bin, "--user-dir", helpers.USER_DIR, "--path",
                                       save / "checkpoint_last.pt", "--task", "translation",
                                       "--source-lang", helpers.SRC, "--target-lang",
                                       helpers.TGT, "--cpu", "--beam", "3", "--batch-size", "8",
                                       "--max-len-b", "20", "--num-workers", "0"], fresh=True)
    hyps = sorted(line for line in out.stdout.splitlines() if line.startswith(("H-", "D-")))
    results[key] = (weights_digest(save / "checkpoint_last.pt"), "\n".join(hyps))


def test_a_rerun_on_cpu_is_bit_identical_alone_or_beside_another(synthetic_databin, tmp_path):
    results = {}
    train_and_decode(synthetic_databin, tmp_path / "alone", results, "alone")
    # the same run twice side by side (as --jobs 2 runs them): each trains beside the other; one
    # of them also decodes (the other's decoding would show the same)
    jobs = [threading.Thread(target=train_and_decode,
                             args=(synthetic_databin, tmp_path / name, results, name, decode))
            for name, decode in (("again", False), ("beside", True))]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()
    assert results["alone"][1], "no hypotheses"
    assert results["again"][0] == results["alone"][0]
    assert results["beside"] == results["alone"]
