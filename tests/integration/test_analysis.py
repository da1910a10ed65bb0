"""The analyses of Zeng et al. 2021 §4 (ran_lab.analysis) and scripts/analyze-ran.py, on tiny
checkpoints of ran_transformer (RAN-ALL) and fairseq's transformer trained for 2 updates."""
import csv
import json
import math
import subprocess
import sys

import pytest
import sacrebleu
import torch

import helpers
from ran_lab.analysis import attention_stats, checkpoints, heatmaps, histograms, length_bins, results
from systems import TINY_LSTM, TINY_RAN, TINY_TRANSFORMER

SCRIPT = helpers.REPO / "scripts" / "analyze-ran.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SYSTEMS = {"transformer": ("transformer", TINY_TRANSFORMER), "ran": ("ran_transformer", TINY_RAN)}


@pytest.fixture(scope="module")
def tiny_checkpoints(synthetic_databin, tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis")
    for name, (arch, flags) in SYSTEMS.items():
        helpers.train(synthetic_databin, root / name, arch, flags, max_update=2)
    return {name: root / name / "checkpoint_last.pt" for name in SYSTEMS}


@pytest.fixture(scope="module")
def loaded(tiny_checkpoints):
    """name -> (model, valid samples, pad), loaded once."""
    cache = {}

    def get(name):
        if name not in cache:
            task, model = checkpoints.load_checkpoint(str(tiny_checkpoints[name]))
            samples = checkpoints.teacher_forced_samples(task, model, "valid", batch_size=8)
            cache[name] = (model, samples, task.target_dictionary.pad())
        return cache[name]

    return get


def padded_length(samples):
    """Token count (EOS included) of the shortest sentence of the first batch, which is padded
    there (sources on the left, targets on the right); in the synthetic corpus its source and
    target have the same number of words."""
    lengths = samples[0]["net_input"]["src_lengths"]
    assert lengths[-1] < lengths[0]
    return int(lengths[-1])


def is_png(path):
    return path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


# ---- entropy (Fig. 4, Eq. 5) ---------------------------------------------------------------------
@pytest.mark.parametrize("name", SYSTEMS)
def test_entropy_has_a_row_per_layer_and_side(loaded, name):
    model, samples, pad = loaded(name)
    rows = attention_stats.layer_entropy(model, samples, pad)
    assert [(r["side"], r["layer"]) for r in rows] == [(s, i) for s in ("enc", "dec", "crs")
                                                       for i in (1, 2)]
    longest = max(max(s["net_input"]["src_tokens"].size(1), s["target"].size(1)) for s in samples)
    source_tokens = sum(int(s["net_input"]["src_lengths"].sum()) for s in samples)
    target_tokens = sum(int(s["target"].ne(pad).sum()) for s in samples)
    for row in rows:
        assert 0 < row["entropy"] <= math.log(longest) + 1e-6
        # two heads times the real (unpadded) query positions
        assert row["queries"] == 2 * (source_tokens if row["side"] == "enc" else target_tokens)


# ---- Jensen-Shannon divergence (Fig. 7) ----------------------------------------------------------
def brute_js(p, q):
    m = [(a + b) / 2 for a, b in zip(p, q)]

    def kl(x):
        return sum(a * math.log(a / c) for a, c in zip(x, m) if a > 0)

    return (kl(p) + kl(q)) / 2


def test_js_matches_a_brute_force_computation():
    # 3 layers, 2 heads, one sentence with 2 queries (the second is padding), 3 keys.
    real = {0: [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]],
            1: [[0.2, 0.3, 0.5], [0.0, 0.0, 1.0]],
            2: [[1 / 3, 1 / 3, 1 / 3], [0.9, 0.1, 0.0]]}
    padding_rows = {0: [0.0, 1.0, 0.0], 1: [1.0, 0.0, 0.0], 2: [0.0, 0.0, 1.0]}
    layers = [torch.tensor([[[real[l][h], padding_rows[l]]] for h in range(2)], dtype=torch.float64)
              for l in range(3)]
    mask = torch.tensor([[True, False]])
    for heads in attention_stats.HEAD_MODES:
        sums, queries = attention_stats.pairwise_js_sums(layers, mask, heads)
        assert queries == 1
        for a in range(3):
            for b in range(3):
                if heads == "mean":
                    rows = [[(x + y) / 2 for x, y in zip(*real[l])] for l in (a, b)]
                    expected = brute_js(*rows)
                else:
                    expected = sum(brute_js(real[a][h], real[b][h]) for h in range(2)) / 2
                assert sums[a, b].item() == pytest.approx(expected, abs=1e-12), (heads, a, b)
    disjoint = attention_stats.js_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert disjoint.item() == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="--heads"):
        attention_stats.pairwise_js_sums(layers, mask, "first")


@pytest.mark.parametrize("heads", attention_stats.HEAD_MODES)
@pytest.mark.parametrize("name", SYSTEMS)
def test_layer_js_is_symmetric_zero_on_the_diagonal_and_bounded(loaded, name, heads):
    model, samples, pad = loaded(name)
    result = attention_stats.layer_js(model, samples, pad, heads)
    assert list(result) == ["enc", "dec", "crs"]
    for div in result.values():
        assert div.layers == [1, 2] and div.queries > 0
        assert torch.equal(div.js, div.js.T)
        assert torch.all(div.js.diagonal() == 0)
        assert div.js[0, 1] > 0 and div.js.max() <= math.log(2)


# ---- heatmaps (Fig. 6) ---------------------------------------------------------------------------
def check_distributions(weights, causal):
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    if causal:
        assert torch.equal(weights, weights.tril())
    else:
        assert weights.triu(1).gt(0).any()


def test_ran_heatmaps_are_the_learned_matrices(loaded):
    model, samples, pad = loaded("ran")
    length = padded_length(samples)
    weights = heatmaps.self_attention_weights(model, length)
    for side, entry in weights.items():
        assert entry.attention == "ran" and entry.sentences is None
        assert entry.weights.shape == (2, 2, length, length)
        check_distributions(entry.weights, causal=side == "dec")
    # RAN's weights do not depend on the input: the recorded weights of every sentence of that
    # length (left-padded sources, right-padded targets) are the matrices themselves.
    recorded = heatmaps.data_average_weights(model, samples, pad, length, ("enc", "dec"))
    for side in ("enc", "dec"):
        assert recorded[side].sentences >= 1
        assert torch.allclose(recorded[side].weights, weights[side].weights, atol=1e-5)
    with pytest.raises(ValueError, match="--max-attention-positions"):
        heatmaps.self_attention_weights(model, 33)


@pytest.mark.parametrize("kind", ["synthesizer", "gaussian"])
def test_heatmaps_of_the_baselines_matrices(synthetic_databin, kind):
    flags = (*TINY_RAN, "--encoder-self-attention", kind, "--decoder-self-attention", kind)
    _, model = helpers.build_model("ran_transformer", synthetic_databin, flags)
    weights = heatmaps.self_attention_weights(model, 7)
    for side, entry in weights.items():
        assert entry.attention == kind and entry.weights.shape == (2, 2, 7, 7)
        check_distributions(entry.weights, causal=side == "dec")


def test_dot_product_heatmaps_average_the_sentences_of_that_length(loaded):
    model, samples, pad = loaded("transformer")
    length = padded_length(samples)
    weights = heatmaps.self_attention_weights(model, length, samples=samples, pad=pad)
    assert weights["enc"].sentences == sum(int(s["net_input"]["src_lengths"].eq(length).sum())
                                           for s in samples)
    assert weights["dec"].sentences == sum(int(s["target"].ne(pad).sum(1).eq(length).sum())
                                           for s in samples)
    for side, entry in weights.items():
        assert entry.attention == "dot" and entry.weights.shape == (2, 2, length, length)
        check_distributions(entry.weights, causal=side == "dec")
    with pytest.raises(ValueError, match="no input-independent matrices"):
        heatmaps.self_attention_weights(model, length)
    with pytest.raises(ValueError, match="--length"):
        heatmaps.self_attention_weights(model, 99, samples=samples, pad=pad)


# ---- histograms of attention weights (Fig. 5) ----------------------------------------------------
def sentence_lengths(samples, pad):
    """Per sentence: (source tokens, target tokens), EOS included."""
    out = []
    for sample in samples:
        src = sample["net_input"]["src_lengths"].tolist()
        tgt = sample["target"].ne(pad).sum(1).tolist()
        out += list(zip(src, tgt))
    return out


def test_default_layers_are_first_middle_and_last():
    assert histograms.default_layers(6) == [1, 3, 6]  # the paper's Fig. 5
    assert histograms.default_layers(3) == [1, 2, 3]
    assert histograms.default_layers(1) == [1]


@pytest.mark.parametrize("name", SYSTEMS)
def test_histograms_count_every_distributed_weight(loaded, name):
    """Each side and layer counts heads × (Σ n² encoder, Σ n(n+1)/2 decoder) weights: real keys
    only, and no future keys in the decoder; the fractions sum to 1."""
    model, samples, pad = loaded(name)
    rows = histograms.weight_histograms(model, samples, pad, bins=10)
    lengths = sentence_lengths(samples, pad)
    heads = 2
    expected = {"enc": heads * sum(s * s for s, _ in lengths),
                "dec": heads * sum(t * (t + 1) // 2 for _, t in lengths)}
    for side in ("enc", "dec"):
        for layer in (1, 2):
            chosen = [r for r in rows if (r["side"], r["layer"]) == (side, layer)]
            assert [r["bin"] for r in chosen] == list(range(10))
            assert sum(r["count"] for r in chosen) == expected[side], (side, layer)
            assert sum(r["fraction"] for r in chosen) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="--layers"):
        histograms.weight_histograms(model, samples, pad, layers=[3])
    with pytest.raises(ValueError, match="--sides"):
        histograms.weight_histograms(model, samples, pad, sides=["crs"])


def test_ran_histograms_are_those_of_its_matrices(loaded):
    """RAN's weights are its matrices cut to each sentence's length: the histogram of the
    recorded weights equals the histogram of softmax(A_l) per sentence (Eq. 2)."""
    model, samples, pad = loaded("ran")
    rows = histograms.weight_histograms(model, samples, pad, bins=20, layers=[2])
    lengths = sentence_lengths(samples, pad)
    for side, index in (("enc", 0), ("dec", 1)):
        matrices = heatmaps.input_independent(model, side)
        expected = torch.zeros(20, dtype=torch.float64)
        for pair in lengths:
            n = pair[index]
            probs = matrices.probs(1, n).detach().double()  # layer 2, (heads, n, n)
            keep = torch.ones(n, n, dtype=torch.bool)
            if side == "dec":
                keep = keep.tril()
            expected += torch.histc(probs[:, keep], bins=20, min=0.0, max=1.0)
        counts = torch.tensor([float(r["count"]) for r in rows if r["side"] == side],
                              dtype=torch.float64)
        assert torch.allclose(counts, expected, atol=2), side  # bin-edge rounding only


# ---- BLEU by source and target length (Fig. 8) ---------------------------------------------------
def test_length_bleu_equals_sacrebleu_on_each_bins_sentences():
    sources = ["a b", "a b c d e", "one two three four five six seven", "x",
               "p q r s t u v w x y z"]
    refs = ["the cat sat on the mat today", "a dog runs in the green park", "two men play chess",
            "the sun is shining over the sea", "children are playing in the snow outside"]
    systems = {"A": ["the cat sat on a mat today", "a dog runs in a park", "two men play chess",
                     "sun shines over the sea", "children play in the snow outside"],
               "B": ["a cat sits on the mat", "the dog runs in the green park", "men playing chess",
                     "the sun is shining over the sea", "kids are playing in snow"]}
    rows = length_bins.bleu_by_length(systems, refs, sources, edges=[3, 6, 20])
    members = {"0-2": [0, 3], "3-5": [1], "6-19": [2, 4], "20+": []}
    assert [(r["system"], r["bin"]) for r in rows] == [(s, b) for s in systems for b in members]
    for row in rows:
        ids = members[row["bin"]]
        assert row["sentences"] == len(ids)
        if not ids:
            assert row["bleu"] is None
            continue
        hyps = systems[row["system"]]
        expected = sacrebleu.corpus_bleu([hyps[i] for i in ids], [[refs[i] for i in ids]]).score
        assert row["bleu"] == pytest.approx(expected)
    assert len({r["bleu"] for r in rows if r["bleu"] is not None}) > 3  # the bins differ
    with pytest.raises(ValueError, match="'A' has 4 hypotheses"):
        length_bins.bleu_by_length({"A": systems["A"][:4]}, refs, sources)
    with pytest.raises(ValueError, match="--src"):
        length_bins.bleu_by_length(systems, refs, sources[:4])
    with pytest.raises(ValueError, match="--bins"):
        length_bins.length_bins([10, 5])


def test_length_bleu_by_target_bins_by_reference_words_in_seven_default_bins():
    refs = [" ".join(["w"] * n) for n in (3, 12, 25, 37, 44, 55, 70, 8)]
    sources = ["x"] * len(refs)
    hyps = {"A": [r.replace("w", "v", 1) for r in refs]}
    rows = length_bins.bleu_by_length(hyps, refs, sources, by="target")
    assert [r["bin"] for r in rows] == ["0-9", "10-19", "20-29", "30-39", "40-49", "50-59", "60+"]
    assert [r["sentences"] for r in rows] == [2, 1, 1, 1, 1, 1, 1]
    assert {r["by"] for r in rows} == {"target"}
    by_source = length_bins.bleu_by_length(hyps, refs, sources, by="source")
    assert [r["sentences"] for r in by_source] == [8, 0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="--by"):
        length_bins.bleu_by_length(hyps, refs, sources, by="hypothesis")


def fake_reproduction(root, systems, lines):
    """A results folder as the engine writes it: results.json, PAIR/SYSTEM/seed1/hyp.detok.txt,
    and raw references and sources in a data-bin folder."""
    data = root / "bin"
    data.mkdir(parents=True)
    (data / "test.raw.en").write_text("".join(r + "\n" for r in lines["ref"]))
    (data / "test.raw.de").write_text("".join(s + "\n" for s in lines["src"]))
    entries = []
    for name, slug in systems.items():
        folder = root / "out" / "de-en" / slug / "seed1"
        folder.mkdir(parents=True)
        (folder / "hyp.detok.txt").write_text("".join(h + "\n" for h in lines[name]))
        entries.append({"pair": "de-en", "system": name, "seed": 1, "subsets": {"test": {
            "hyp_file": "hyp.detok.txt", "raw_ref": str(data / "test.raw.en")}}})
    (root / "out" / "results.json").write_text(json.dumps({"results": entries}))
    return root / "out"


def test_reproduction_outputs_read_a_results_folder(tmp_path):
    lines = {"ref": ["a b c", "d e"], "src": ["x y z", "u v"], "TransF": ["a b", "d e"],
             "−Pos-E": ["a", "e"]}
    out = fake_reproduction(tmp_path, {"TransF": "TransF", "−Pos-E": "Pos-E"}, lines)
    outputs = results.reproduction_outputs(out, "de-en")
    assert outputs.hypotheses == {"TransF": lines["TransF"], "−Pos-E": lines["−Pos-E"]}
    assert outputs.refs == lines["ref"] and outputs.sources == lines["src"]
    assert list(results.reproduction_outputs(out, "de-en", systems=["−Pos-E"]).hypotheses) == [
        "−Pos-E"]
    with pytest.raises(ValueError, match="--systems"):
        results.reproduction_outputs(out, "de-en", systems=["RAN-X"])
    with pytest.raises(ValueError, match="--pair"):
        results.reproduction_outputs(out, "en-de")
    with pytest.raises(FileNotFoundError, match="--results"):
        results.reproduction_outputs(tmp_path / "nowhere", "de-en")


# ---- loading and the command line ----------------------------------------------------------------
def test_clear_errors_for_missing_checkpoints_and_models_without_attention(synthetic_databin,
                                                                          tmp_path):
    with pytest.raises(FileNotFoundError, match="--checkpoint"):
        checkpoints.load_checkpoint(str(tmp_path / "missing.pt"))
    _, lstm = helpers.build_model("lstm", synthetic_databin, TINY_LSTM)
    with pytest.raises(ValueError, match="no attention modules"):
        checkpoints.require_attention(lstm, "lstm")
    assert checkpoints.labelled("ran=x/y.pt") == ("ran", "x/y.pt")
    assert checkpoints.labelled("runs/ran-all/checkpoint_best.pt")[0] == "ran-all"


def analyze(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, env=helpers.fairseq_env(), timeout=300)


def script_main():
    """``ran-analyze ran`` in-process (``scripts/analyze-ran.py`` runs it with its paper fixed)."""
    from ran_lab.analysis import cli

    return lambda argv: cli.main(["ran", *argv])


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_cli_writes_csv_and_png_for_every_analysis(tiny_checkpoints, loaded, tmp_path):
    out = tmp_path / "out"
    ran, transformer = tiny_checkpoints["ran"], tiny_checkpoints["transformer"]
    # One real command line (the script), then the other analyses through ran-analyze in-process.
    proc = analyze("entropy", "--checkpoint", f"ran={ran}", "--checkpoint", f"transf={transformer}",
                   "--max-sentences", 16, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_csv(out / "entropy.csv")
    assert len(rows) == 12 and {r["system"] for r in rows} == {"ran", "transf"}

    main = script_main()
    main(["js", "--checkpoint", str(ran), "--heads", "matched", "--out", str(out)])
    js = read_csv(out / "js.csv")
    assert len(js) == 3 * 4 and all(r["system"] == "ran" for r in js)
    main(["heatmap", "--checkpoint", str(ran), "--length", "5", "--out", str(out)])
    assert len(read_csv(out / "heatmap.csv")) == 2 * 2 * 2 * 5 * 5
    length = padded_length(loaded("transformer")[1])
    main(["heatmap", "--checkpoint", str(transformer), "--length", str(length), "--sides", "enc",
          "--name", "heatmap-dot", "--out", str(out)])
    assert {r["attention"] for r in read_csv(out / "heatmap-dot.csv")} == {"dot"}

    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("a b c\nd e f g h i j k l m n o\n")
    ref.write_text("the cat sat on the mat\na man is riding a bike\n")
    gens = []
    for name, lines in (("one", ["the cat sat on a mat", "a man rides a bike"]),
                        ("two", ["a cat on the mat", "a man is riding a bike"])):
        gen = tmp_path / f"gen-{name}.txt"
        gen.write_text("".join(f"S-{i}\tx\nD-{i}\t-0.5\t{line}\n" for i, line in enumerate(lines)))
        gens += ["--system", f"{name}={gen}"]
    main(["length-bleu", *gens, "--ref", str(ref), "--src", str(src), "--bins", "5",
          "--out", str(out)])
    assert [(r["by"], r["system"], r["bin"], r["sentences"])
            for r in read_csv(out / "length-bleu.csv")] == [
        ("source", "one", "0-4", "1"), ("source", "one", "5+", "1"),
        ("source", "two", "0-4", "1"), ("source", "two", "5+", "1"),
        ("target", "one", "0-4", "0"), ("target", "one", "5+", "2"),
        ("target", "two", "0-4", "0"), ("target", "two", "5+", "2")]
    main(["histogram", "--checkpoint", f"ran={ran}", "--checkpoint", f"transf={transformer}",
          "--bins", "8", "--max-sentences", "16", "--out", str(out)])
    hist = read_csv(out / "histogram.csv")
    assert len(hist) == 2 * 2 * 2 * 8  # systems × sides × layers (1 and 2 of 2) × bins
    results_dir = fake_reproduction(tmp_path / "repro", {"TransF": "TransF", "RAN-D": "RAN-D"}, {
        "ref": ["the cat sat on the mat", "a man is riding a bike"], "src": ["a b c", "d e f"],
        "TransF": ["the cat sat on a mat", "a man rides a bike"],
        "RAN-D": ["a cat on the mat", "a man is riding a bike"]})
    main(["length-bleu", "--results", str(results_dir), "--pair", "de-en", "--systems",
          "RAN-D,TransF", "--by", "target", "--name", "length-bleu-results", "--out", str(out)])
    assert [(r["system"], r["bin"], r["sentences"])
            for r in read_csv(out / "length-bleu-results.csv") if r["sentences"] != "0"] == [
        ("RAN-D", "0-9", "2"), ("TransF", "0-9", "2")]

    for name in ("entropy", "js", "heatmap", "heatmap-dot", "length-bleu", "histogram",
                 "length-bleu-results"):
        assert is_png(out / f"{name}.png"), name

    src.write_text("a b\nc d\ne f\n")
    ref.write_text("a b\nc d\ne f\n")
    with pytest.raises(SystemExit, match="'one' has 2 hypotheses but there are 3 references"):
        main(["length-bleu", *gens, "--ref", str(ref), "--src", str(src), "--out", str(out)])
    with pytest.raises(SystemExit, match="no checkpoint at"):
        main(["entropy", "--checkpoint", str(tmp_path / "none.pt"), "--out", str(out)])


def test_validation_curves_of_a_reproduction(tmp_path):
    """ran_lab.analysis.curves: every validation of every training in results.json, one per
    update (a resumed training logs its last validation again), none for a system that decodes
    another's checkpoint; a CSV and a PNG from the command line; a missing system is named."""
    from ran_lab.analysis import curves

    def curve(losses, updates):
        return [{"epoch": i + 1, "num_updates": u, "loss": x}
                for i, (u, x) in enumerate(zip(updates, losses))]

    report = {"results": [
        {"pair": "de-en", "system": "A", "seed": 1,
         "valid_curve": curve([6.0, 5.0, 4.6, 4.5], [10, 20, 20, 30])},
        {"pair": "de-en", "system": "B", "seed": 1, "valid_curve": curve([6.5, 5.5], [10, 20])},
        {"pair": "de-en", "system": "B greedy", "seed": 1, "checkpoint_of": "B",
         "valid_curve": curve([6.5, 5.5], [10, 20])},
        {"pair": "en-de", "system": "A", "seed": 1, "valid_curve": curve([7.0], [10])},
    ]}
    (tmp_path / "results.json").write_text(json.dumps(report))
    rows = curves.validation_curves(tmp_path, "de-en")
    assert [(r["system"], r["num_updates"], r["loss"]) for r in rows] == [
        ("A", 10, 6.0), ("A", 20, 4.6), ("A", 30, 4.5), ("B", 10, 6.5), ("B", 20, 5.5)]
    assert [r["system"] for r in curves.validation_curves(tmp_path, None, ["B", "A"])] == \
        ["B", "B", "A", "A", "A", "A"]
    with pytest.raises(ValueError, match="no result for 'C' on de-en"):
        curves.validation_curves(tmp_path, "de-en", ["A", "C"])
    proc = subprocess.run([sys.executable, "-m", "ran_lab.analysis.curves", "--results",
                           str(tmp_path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=helpers.REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "out" / "valid-curve.csv") as f:
        assert len(list(csv.DictReader(f))) == 6
    assert is_png(tmp_path / "out" / "valid-curve.png")


def test_validation_curves_tell_every_line_apart(tmp_path, monkeypatch):
    """More systems than the colour cycle has colours: each line still has its own colour and
    style, and the long legend stands beside the panel, not over the curves."""
    from ran_lab.analysis import plots

    saved = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.setdefault("fig", fig) and path)
    rows = [{"pair": "de-en", "system": f"S{k}", "seed": 1, "num_updates": u, "loss": 5 - k / 100}
            for k in range(13) for u in (10, 20)]
    plots.plot_valid_curves(rows, tmp_path / "c.png")
    ax = saved["fig"].axes[0]
    looks = {(line.get_color(), line.get_linestyle()) for line in ax.get_lines()}
    assert len(ax.get_lines()) == 13 and len(looks) == 13
    legend = ax.get_legend()
    assert legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1
