"""scripts/reproduce-pervasive.py (Elbayad et al. 2018) end to end in a short setting (a Table 1
model, a Table 2 model and ConvS2S from Table 3, one pair, 2 updates) on a tiny corpus: its
parameter and FLOP columns, the Fig. 6 PNG, and ran_fairseq.analysis.alignments; the --full
commands; and the agreement of configs/pervasive/*.json with each other."""
import functools
import json
import math

import pytest
import torch

import helpers
from ran_fairseq.analysis.alignments import decoded_alignments, main as alignments_main

SCRIPT = helpers.REPO / "scripts" / "reproduce-pervasive.py"
DIR = helpers.REPO / "configs" / "pervasive"
SYSTEMS = ["max", "max k=5 L=6", "ConvS2S"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIZE_FLAGS = {"--kernel-size", "--num-layers", "--encoder-embed-dim", "--encoder-hidden-size",
              "--decoder-embed-dim", "--decoder-hidden-size", "--decoder-out-embed-dim",
              "--memory-efficient-densenet"}


reproduce = functools.partial(helpers.run_reproduction, SCRIPT)


def number(cell):
    return float(cell.replace(",", ""))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The CPU config on a tiny word-level de-en corpus (no BPE)."""
    root = tmp_path_factory.mktemp("reproduce-pervasive")
    helpers.scored_corpus(root)
    return root, helpers.short_reproduction(SCRIPT, DIR / "cpu.json", root, SYSTEMS)


def test_table_columns_and_alignment_figure(first_run):
    root, out = first_run
    rows = helpers.table_rows((out / "TABLE.md").read_text())
    assert list(rows) == SYSTEMS
    for name, row in rows.items():
        for heading in ("tok BLEU", "sacreBLEU", "chrF", "TER", "decode sent/s"):
            assert math.isfinite(number(row[heading])), (name, heading)
    # the masked half of each k x k kernel: L * 4g * g * k * floor(k/2) weights (g = 16)
    for name, (k, layers) in {"max": (3, 8), "max k=5 L=6": (5, 6)}.items():
        extra = number(rows[name]["params with k×k kernels"]) - number(rows[name]["params"])
        assert extra == layers * 4 * 16 * 16 * k * (k // 2), name
        assert number(rows[name]["GFLOPs/sentence"]) > 0
    assert rows["ConvS2S"]["params with k×k kernels"] == rows["ConvS2S"]["GFLOPs/sentence"] == ""
    # Fig. 6 for the Table 1 model only
    assert rows["max"]["Fig. 6"] == "de-en/max/alignments.png"
    assert (out / "de-en" / "max" / "alignments.png").read_bytes()[:8] == PNG_MAGIC
    assert rows["max k=5 L=6"]["Fig. 6"] == rows["ConvS2S"]["Fig. 6"] == ""
    assert not (out / "de-en" / "max_k-5_L-6" / "alignments.png").exists()
    # GFLOPs: the mean of complexity() over the test pairs' lengths, from the checkpoint
    from ran_fairseq.analysis.checkpoints import load_checkpoint

    task, model = load_checkpoint(str(root / "ckpt" / "de-en" / "max" / "checkpoint_last.pt"),
                                  str(root / "bin.de-en"))
    task.load_dataset("test")
    test = task.dataset("test")
    flops = [model.complexity(s, t)["flops"] for s, t in zip(test.src_sizes, test.tgt_sizes)]
    assert number(rows["max"]["GFLOPs/sentence"]) == pytest.approx(
        sum(flops) / len(flops) / 1e9, abs=1e-3)


def test_decoded_alignments_and_cli(first_run, tmp_path):
    root, _ = first_run
    checkpoint = root / "ckpt" / "de-en" / "max" / "checkpoint_last.pt"
    from ran_fairseq.analysis.checkpoints import load_checkpoint

    task, model = load_checkpoint(str(checkpoint), str(root / "bin.de-en"))
    alignments = decoded_alignments(task, model, "test", sentences=2, beam=2)
    test = task.dataset("test")
    assert len(alignments) == 2
    for i, alignment in enumerate(alignments):
        assert len(alignment.source) == test.src_sizes[i]  # no padding columns
        assert alignment.source[-1] == alignment.target[-1] == "</s>"
        assert alignment.weights.shape == (len(alignment.target), len(alignment.source))
        # max pooling's implicit alignment: shares of the pooled features, a distribution per row
        torch.testing.assert_close(alignment.weights.sum(-1),
                                   torch.ones(len(alignment.target)), atol=1e-5, rtol=0)
    png = tmp_path / "fig.png"
    alignments_main(["--checkpoint", str(checkpoint), "--data", str(root / "bin.de-en"),
                     "--sentences", "2", "--out", str(png)])
    assert png.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(SystemExit, match="no checkpoint at"):
        alignments_main(["--checkpoint", str(tmp_path / "missing.pt"), "--out", str(png)])


def test_full_settings_print_paper_size_commands_on_iwslt14():
    proc = reproduce("--full", "--pairs", "en-de", "--systems", "max k=7 L=24,Transformer",
                     "--dry-run")
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    pa_train, _, transformer_train, _ = commands
    assert "--arch pervasive_attention " in pa_train and "data-bin/iwslt14.en-de" in pa_train
    assert "--kernel-size 7 --num-layers 24" in pa_train
    assert "--memory-efficient-densenet" in pa_train and "--cpu" not in pa_train
    assert "--arch transformer_iwslt_de_en " in transformer_train
    assert "--memory-efficient-densenet" not in transformer_train


def test_configs_agree():
    cpu_systems = json.loads((DIR / "systems.json").read_text())
    full_systems = json.loads((DIR / "systems-full.json").read_text())
    paper = json.loads((DIR / "paper.json").read_text())

    def by_name(spec):
        return {s["name"]: s for s in spec["systems"]}

    cpu, full = by_name(cpu_systems), by_name(full_systems)
    assert cpu_systems["baseline"] == full_systems["baseline"] == "max"
    # Tables 1 and 3: the same systems in both files, with the same flags apart from sizes
    for table in ("1", "3"):
        names = [n for n, s in full.items() if table in s["tables"]]
        assert names == [n for n, s in cpu.items() if table in s["tables"]], table
        for name in names:
            flags = [helpers.flag_pairs(spec[name]["flags"]) for spec in (cpu, full)]
            for pairs in flags:
                for flag in SIZE_FLAGS:
                    pairs.pop(flag, None)
            if name == "Transformer":  # explicit 3+3 dimensions on the CPU, an arch at full size
                flags[0] = {f: v for f, v in flags[0].items() if "-layers" not in f
                            and "-dim" not in f and "-heads" not in f and "share" not in f}
                flags[1].pop("--share-decoder-input-output-embed")
            assert flags[0] == flags[1], name
    # Table 2: max pooling over a k x L grid that includes the baseline
    for spec in (cpu, full):
        grid = [s for s in spec.values() if "2" in s["tables"]]
        assert len(grid) >= 4 and all(helpers.flag_pairs(s["flags"])["--aggregator"] == "max"
                                      for s in grid)
    # the paper's numbers are keyed by the full-size systems of their table
    for column in paper["columns"]:
        table = column["key"][len("table")]
        assert set(column["values"]) == {n for n, s in full.items() if table in s["tables"]}
    # both scales train with the same criterion and label smoothing
    for config in ("cpu.json", "full.json"):
        flags = helpers.flag_pairs(json.loads((DIR / config).read_text())["train_flags"])
        assert flags["--criterion"] == "label_smoothed_cross_entropy_with_entropy"
        assert flags["--label-smoothing"] == "0.1"
