"""The peer benchmark's own logic (ran_lab/bench/peers.py) against a stub peer, in this process:
the authors' code itself is measured by scripts/bench-peers.py with a local clone."""
import torch
import torch.nn.functional as F

from ran_lab.bench import peers
from ran_lab.bench.peer_worker import Side

CASE = {"arch": "pervasive_attention", "peer": "test_peers:stub_peer", "sentences": 2,
        "source_length": 5, "target_length": 4, "vocab": 40, "seed": 1, "embed_dim": 8,
        "layers": 2, "growth_rate": 4, "kernel_size": 3}


class StubPeer(Side):
    """A peer whose model is one embedding and one projection."""

    def __init__(self, case):
        model = torch.nn.Sequential(torch.nn.Embedding(case["vocab"], 8),
                                    torch.nn.Linear(8, case["vocab"]))
        super().__init__(model, case, {"kind": "stub"})

    def log_probs(self, batch):
        return F.log_softmax(self.model(batch["prev"]), dim=-1)

    def greedy(self, batch, length):
        return torch.zeros(batch["src"].size(0), length, dtype=torch.long)


def stub_peer(case):
    return StubPeer(case)


def test_a_case_times_both_sides_interleaved_and_reports_a_row():
    result = peers.run_case("tiny", CASE, {}, reps=3, warmup=1, threads=1,
                            runner_class=peers.InProcessRunner, memory_steps=0)
    train = result["train"]
    assert set(train["sides"]) == {"plugin", CASE["peer"]}
    assert all(len(times) == 3 for times in train["seconds"].values())
    assert train["round_ratios"]["n"] == 3 and train["ratio_of_medians"] > 0
    assert result["info"][CASE["peer"]]["kind"] == "stub"
    assert result["info"]["plugin"]["parameters"] > result["info"][CASE["peer"]]["parameters"]
    machine = {"cpu": "cpu", "cores": 2, "threads": 1, "torch": torch.__version__,
               "load_before": "0", "load_after": "0", "date": "d", "commit": "c", "reps": 3,
               "warmup": 1, "memory_steps": 0, "peers": {}}
    row = peers.report({"tiny": result}, machine).splitlines()[2]
    assert row.startswith(f"| tiny | {CASE['peer']} |") and "×" in row


def test_compare_takes_the_plugin_over_the_peer():
    got = peers.compare({"plugin": [2.0, 4.0, 6.0], "peer": [1.0, 2.0, 2.0]})
    assert got["ratio_of_medians"] == 2.0
    assert got["round_ratios"]["min"] == 2.0 and got["round_ratios"]["max"] == 3.0


def test_a_missing_clone_is_one_line_saying_how_to_get_it(tmp_path):
    line = peers.clone_problem("attn2d", None)
    assert "git clone https://github.com/elbayadm/attn2d" in line and "\n" not in line
    assert "has no nmt/models/densenet.py" in peers.clone_problem("attn2d", tmp_path)
