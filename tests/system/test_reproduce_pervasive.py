"""scripts/reproduce-pervasive.sh (Elbayad et al. 2018) end to end in a short setting (a Table 1
model, a Table 2 model and ConvS2S from Table 3, narrower than the recipe's, one pair, 2 updates)
on a tiny corpus: its parameter and FLOP columns, the Fig. 6 PNG, and ran_lab.analysis.alignments;
the --full commands; and the agreement of configs/pervasive/*.json with each other."""
import functools
import json
import math

import pytest
import torch

import helpers
from ran_lab.analysis.alignments import decoded_alignments, main as alignments_main

SCRIPT = helpers.REPO / "scripts" / "reproduce-pervasive.sh"
DIR = helpers.REPO / "configs" / "pervasive"
SYSTEMS = ["max", "max k=5 L=6", "ConvS2S"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIZE_FLAGS = {"--kernel-size", "--num-layers", "--encoder-embed-dim", "--encoder-hidden-size",
              "--decoder-embed-dim", "--decoder-hidden-size", "--decoder-out-embed-dim",
              "--memory-efficient-densenet"}


reproduce = functools.partial(helpers.run_reproduction, SCRIPT)


def number(cell):
    return float(cell.replace(",", "").rstrip("†↓"))  # a significance mark


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, scored_corpus):
    """The CPU config on a tiny word-level de-en corpus (no BPE)."""
    root = tmp_path_factory.mktemp("reproduce-pervasive")
    scored_corpus(root)
    # narrower than the recipe's (the columns' checks below hold at any embedding width): the
    # DenseNets' embeddings 16 instead of 64 (growth, kernels and layers as the paper's), ConvS2S
    # two layers of 32 instead of four and three of 256
    systems = json.loads((DIR / "systems.json").read_text())
    for system in systems["systems"]:
        if system["arch"] == "pervasive_attention_small":
            system["flags"] += ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16"]
        elif system["name"] == "ConvS2S":
            system["flags"] += ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
                                "--decoder-out-embed-dim", "32", "--encoder-layers",
                                "[(32, 3)] * 2", "--decoder-layers", "[(32, 3)] * 2"]
    (root / "systems.json").write_text(json.dumps(systems))
    config = json.loads((DIR / "cpu.json").read_text())
    config["systems"] = str(root / "systems.json")
    (root / "narrow.json").write_text(json.dumps(config))
    return root, helpers.short_reproduction(SCRIPT, root / "narrow.json", root, SYSTEMS)


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
    assert rows["max"]["Fig. 6"] == "de-en/max/seed1/alignments.png"
    assert (out / "de-en" / "max" / "seed1" / "alignments.png").read_bytes()[:8] == PNG_MAGIC
    assert rows["max k=5 L=6"]["Fig. 6"] == rows["ConvS2S"]["Fig. 6"] == ""
    assert not (out / "de-en" / "max_k-5_L-6" / "seed1" / "alignments.png").exists()
    # GFLOPs: the mean of complexity() over the test pairs' lengths, from the checkpoint
    from ran_lab.analysis.checkpoints import load_checkpoint

    task, model = load_checkpoint(str(root / "ckpt" / "de-en" / "max" / "seed1" /
                                      "checkpoint_last.pt"),
                                  str(root / "bin.de-en"))
    task.load_dataset("test")
    test = task.dataset("test")
    flops = [model.complexity(s, t)["flops"] for s, t in zip(test.src_sizes, test.tgt_sizes)]
    assert number(rows["max"]["GFLOPs/sentence"]) == pytest.approx(
        sum(flops) / len(flops) / 1e9, abs=1e-3)


def test_decoded_alignments_and_cli(first_run, tmp_path):
    root, _ = first_run
    checkpoint = root / "ckpt" / "de-en" / "max" / "seed1" / "checkpoint_last.pt"
    from ran_lab.analysis.checkpoints import load_checkpoint

    task, model = load_checkpoint(str(checkpoint), str(root / "bin.de-en"))
    shares = decoded_alignments(task, model, "test", sentences=2, beam=2, reading="share")
    eq7 = decoded_alignments(task, model, "test", sentences=2, beam=2)  # Eq. 7, the default
    test = task.dataset("test")
    assert len(shares) == len(eq7) == 2
    for i, (alignment, alpha) in enumerate(zip(shares, eq7)):
        assert len(alignment.source) == test.src_sizes[i]  # no padding columns
        assert alignment.source[-1] == alignment.target[-1] == "</s>"
        assert alignment.weights.shape == (len(alignment.target), len(alignment.source))
        # the token-independent reading: shares of the pooled features, a distribution per row
        assert alignment.reading == "share" and alpha.reading == "eq7"
        torch.testing.assert_close(alignment.weights.sum(-1),
                                   torch.ones(len(alignment.target)), atol=1e-5, rtol=0)
        # Eq. 7 for the same hypothesis: each row sums to the logit of its token (Eqs. 4-6)
        assert (alpha.source, alpha.target) == (alignment.source, alignment.target)
        src = torch.tensor([task.source_dictionary.index(w) for w in alpha.source])
        out = torch.tensor([task.target_dictionary.index(w) for w in alpha.target])
        prev = torch.cat([out[-1:], out[:-1]])[None]  # EOS first
        with torch.no_grad():
            logits, _ = model.eval()(src[None], torch.tensor([len(src)]), prev)
        torch.testing.assert_close(alpha.weights.sum(-1), logits[0, range(len(out)), out],
                                   rtol=1e-4, atol=1e-4)
    png = tmp_path / "fig.png"
    alignments_main(["--checkpoint", str(checkpoint), "--data", str(root / "bin.de-en"),
                     "--sentences", "2", "--alignment", "share", "--out", str(png)])
    assert png.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(SystemExit, match="no checkpoint at"):
        alignments_main(["--checkpoint", str(tmp_path / "missing.pt"), "--out", str(png)])


def test_full_settings_print_paper_size_commands_on_iwslt14():
    proc = reproduce("--full", "--pairs", "en-de", "--systems", "max k=7 L=12,Transformer",
                     "--dry-run")
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    # five seeds per system (the paper's five runs), a training and a decoding command each
    assert len(commands) == 2 * 2 * 5
    pa_train, pa_generate, transformer_train = commands[0], commands[1], commands[10]
    assert "--arch pervasive_attention " in pa_train
    assert "data-bin/iwslt14-elbayad2018.en-de" in pa_train
    assert "--kernel-size 7 --num-layers 12" in pa_train
    assert "--memory-efficient-densenet" in pa_train and "--cpu" not in pa_train
    assert "--lr-scheduler reduce_lr_on_plateau" in pa_train and "--seed 1" in pa_train
    assert "checkpoint_best.pt" in pa_generate and "--unnormalized" in pa_generate
    assert "--arch transformer " in transformer_train
    assert "--lr-scheduler inverse_sqrt" in transformer_train
    assert "--memory-efficient-densenet" not in transformer_train


# Section 4.1's recipe of Pervasive Attention (and of the authors' RNNsearch): Adam (0.9, 0.999,
# 1e-8), lr 5e-4 multiplied by 0.8 after three evaluations without a relative improvement of 0.01.
RECIPE = {"--optimizer": "adam", "--adam-betas": "(0.9, 0.999)", "--adam-eps": "1e-08",
          "--lr": "0.0005", "--lr-scheduler": "reduce_lr_on_plateau", "--lr-shrink": "0.8",
          "--lr-threshold": "0.01", "--lr-patience": "3"}
TABLE2 = [(3, 16), (3, 20), (5, 8), (5, 12), (5, 16), (5, 20), (5, 24), (5, 28), (7, 12)]


def model_flags(flags):
    """The aggregator and gating of a Pervasive Attention system (sizes and recipe left out)."""
    pairs = helpers.flag_pairs(flags)
    if "--gated-convolutions" in pairs:  # alone it means 'masked'
        pairs["--gated-convolutions"] = pairs["--gated-convolutions"] or "masked"
    return {f: v for f, v in pairs.items() if f in ("--aggregator", "--gated-convolutions")}


def test_configs_agree_with_the_paper():
    cpu_systems = json.loads((DIR / "systems.json").read_text())
    full_systems = json.loads((DIR / "systems-full.json").read_text())
    paper = json.loads((DIR / "paper.json").read_text())
    full_config = json.loads((DIR / "full.json").read_text())

    def by_name(spec):
        return {s["name"]: s for s in spec["systems"]}

    def table(spec, number):
        return [n for n, s in spec.items() if number in s["tables"]]

    cpu, full = by_name(cpu_systems), by_name(full_systems)
    assert cpu_systems["baseline"] == full_systems["baseline"] == "max"
    # Table 1: the paper's five rows at both scales, with the same aggregator and gating
    assert table(cpu, "1") == table(full, "1") == ["avg", "max", "attn", "max gated", "max-attn"]
    for name in table(full, "1"):
        assert model_flags(cpu[name]["flags"]) == model_flags(full[name]["flags"]), name
    assert model_flags(full["max gated"]["flags"])["--gated-convolutions"] == "masked"
    # Table 3: [Max, Attn] against the three baselines, at both scales
    assert table(cpu, "3") == table(full, "3") == ["max-attn", "RNNsearch", "Transformer",
                                                    "ConvS2S"]
    # Table 2: the paper's nine (k, L) rows, max pooling ('max' is k = 5, L = 24)
    grid = []
    for name in table(full, "2"):
        pairs = helpers.flag_pairs(full[name]["flags"])
        assert pairs["--aggregator"] == "max"
        grid.append((int(pairs.get("--kernel-size", 5)), int(pairs.get("--num-layers", 24))))
    assert sorted(grid) == TABLE2
    assert all(helpers.flag_pairs(s["flags"])["--aggregator"] == "max"
               for s in cpu.values() if "2" in s["tables"])
    # Section 4.1: every Pervasive Attention system and RNNsearch train with the paper's recipe,
    # the shared flags are MLE for 40 epochs with validation every 8K updates, the best
    # checkpoint on validation loss, beam 5 without length normalization, and the paper's data
    for name, system in full.items():
        pairs = helpers.flag_pairs(system["flags"])
        if system["arch"] == "pervasive_attention" or name == "RNNsearch":
            assert {f: pairs.get(f) for f in RECIPE} == RECIPE, name
    train = helpers.flag_pairs(full_config["train_flags"])
    assert train["--criterion"] == "cross_entropy" and "--label-smoothing" not in train
    assert train["--max-epoch"] == "40" and train["--validate-interval-updates"] == "8000"
    assert full_config["select"] == "loss" and len(full_config["seeds"]) == 5
    generate = helpers.flag_pairs(full_config["generate_flags"])
    assert generate["--beam"] == "5" and "--unnormalized" in generate
    prepare = full_config["prepare"]
    assert prepare["test_sets"] == "elbayad2018" and prepare["bpe_merges"] == 14000
    # every full-size system's training flags parse (a scheduler's flags go with that scheduler)
    from fairseq import options

    for name, system in full.items():
        argv = ["data", "--task", "translation", "--arch", system["arch"],
                *full_config["train_flags"], *system["flags"], "--seed", "1"]
        options.parse_args_and_arch(options.get_training_parser(), argv)
    # the paper's numbers: Tables 1-2 keyed by their systems, Table 3 by its four rows
    columns = {c["key"]: c["values"] for c in paper["columns"]}
    tables12 = set(table(full, "1")) | set(table(full, "2"))
    for key, values in columns.items():
        expected = tables12 if key.startswith("table12") else set(table(full, "3"))
        assert set(values) == expected, key
        assert all(v is None or isinstance(v, (int, float)) for v in values.values()), key
    assert columns["table12_bleu"]["max-attn"] == columns["table3_de_en_bleu"]["max-attn"] == 33.81
    assert columns["table12_params_m"]["max gated"] - columns["table12_params_m"]["max"] == \
        pytest.approx(2.46)
    assert len(paper["reference_rows"]) == 10
