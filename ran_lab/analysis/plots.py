"""PNG figures of the analyses (matplotlib, Agg backend: no display needed).

matplotlib is imported on first use only; without it, plotting raises an ImportError that says how
to install it (``pip install matplotlib`` or the package's ``plot`` extra).
"""
import logging
import math

SIDE_TITLES = {"enc": "encoder self-attention", "dec": "decoder self-attention",
               "crs": "encoder-decoder attention"}
DPI = 120


def pyplot():
    """matplotlib.pyplot with the Agg backend. Importing fairseq sets the root logger to DEBUG,
    so matplotlib's own loggers are held at WARNING (its font search logs hundreds of lines)."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the analysis plots need matplotlib: pip install matplotlib "
                          "(or pip install 'ran_fairseq[plot]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path):
    plt = pyplot()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_entropy(rows, path):
    """Fig. 4: mean attention entropy (nats) against layer, one panel per side, a line per
    system. rows: dicts with system, side, layer, entropy."""
    plt = pyplot()
    sides = [s for s in SIDE_TITLES if any(r["side"] == s for r in rows)]
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, axes = plt.subplots(1, len(sides), figsize=(4 * len(sides), 3.4), squeeze=False,
                             layout="constrained")
    for ax, side in zip(axes[0], sides):
        for system in systems:
            points = sorted((r["layer"], r["entropy"]) for r in rows
                            if r["side"] == side and r["system"] == system)
            if points:
                ax.plot(*zip(*points), marker="o", label=system)
        ax.set_title(SIDE_TITLES[side])
        ax.set_xlabel("layer")
        ax.set_ylabel("entropy (nats)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.ticklabel_format(axis="y", useOffset=False)
        low, high = ax.get_ylim()
        if high - low < 0.1:  # nearly equal entropies (e.g. uniform attention): no magnified noise
            ax.set_ylim((low + high) / 2 - 0.05, (low + high) / 2 + 0.05)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize="small")
    fig.suptitle("Attention entropy per layer (Eq. 5)")
    return _save(fig, path)


def plot_js(results, path):
    """Fig. 7: JS divergence between layers as heatmaps, a row per system and a column per side.
    results: ``[(system, side, LayerDivergence)]``."""
    plt = pyplot()
    systems = list(dict.fromkeys(system for system, _, _ in results))
    sides = [s for s in SIDE_TITLES if any(side == s for _, side, _ in results)]
    fig, axes = plt.subplots(len(systems), len(sides), squeeze=False, layout="constrained",
                             figsize=(3.6 * len(sides), 3.2 * len(systems)))
    image = None
    for system, side, div in results:
        ax = axes[systems.index(system)][sides.index(side)]
        js = div.js.numpy()
        image = ax.imshow(js, vmin=0, vmax=math.log(2), cmap="viridis")
        ticks = range(len(div.layers))
        ax.set_xticks(ticks, div.layers)
        ax.set_yticks(ticks, div.layers)
        if len(div.layers) <= 8:
            for a in ticks:
                for b in ticks:
                    ax.text(b, a, f"{js[a, b]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if js[a, b] < 0.4 else "black")
        ax.set_title(f"{system}: {SIDE_TITLES[side]}", fontsize=9)
        ax.set_xlabel("layer")
        ax.set_ylabel("layer")
    for row in axes:
        for ax in row:
            if not ax.images:
                ax.axis("off")
    fig.colorbar(image, ax=axes.ravel().tolist(), label="JS divergence (nats, max log 2)")
    return _save(fig, path)


def plot_heatmaps(weights, path, title):
    """Fig. 6: a panel per layer (rows) and head (columns), query positions down and key
    positions across; one colour scale per side. weights: ``{side: SideWeights}``."""
    plt = pyplot()
    layers = sum(w.weights.shape[0] for w in weights.values())
    heads = max(w.weights.shape[1] for w in weights.values())
    fig, axes = plt.subplots(layers, heads, figsize=(1.7 * heads + 1.5, 1.7 * layers + 0.6),
                             squeeze=False, layout="constrained")
    row = 0
    for side, entry in weights.items():
        values = entry.weights.numpy()
        how = (entry.attention if entry.sentences is None
               else f"{entry.attention}, mean of {entry.sentences} sentences")
        side_axes = []
        for layer in range(values.shape[0]):
            for head in range(heads):
                ax = axes[row][head]
                if head < values.shape[1]:
                    image = ax.imshow(values[layer, head], vmin=0, vmax=float(values.max()),
                                      cmap="viridis")
                    side_axes.append(ax)
                    ax.set_xticks([])
                    ax.set_yticks([])
                    if layer == 0:
                        ax.set_title(f"head {head + 1}", fontsize=8)
                    if head == 0:
                        ax.set_ylabel(f"{side} layer {layer + 1}", fontsize=8)
                else:
                    ax.axis("off")
            row += 1
        fig.colorbar(image, ax=side_axes, shrink=0.8, label=f"{SIDE_TITLES[side]} ({how})")
    fig.suptitle(f"{title}\n(rows: query positions, columns: key positions)")
    return _save(fig, path)


def plot_length_bleu(rows, path):
    """Fig. 8: BLEU per length bin, a panel per length kind (source, target: the rows' "by", source
    where absent) and a line per system. rows: dicts with system, bin, sentences, bleu (None for an
    empty bin)."""
    plt = pyplot()
    kinds = list(dict.fromkeys(r.get("by", "source") for r in rows))
    bins = list(dict.fromkeys(r["bin"] for r in rows))
    fig, axes = plt.subplots(1, len(kinds), figsize=((1.2 * len(bins) + 2.5) * len(kinds), 3.4),
                             squeeze=False, layout="constrained")
    for ax, kind in zip(axes[0], kinds):
        chosen = [r for r in rows if r.get("by", "source") == kind]
        sizes = {r["bin"]: r["sentences"] for r in chosen}
        for system in dict.fromkeys(r["system"] for r in chosen):
            by_bin = {r["bin"]: r["bleu"] for r in chosen if r["system"] == system}
            ax.plot(range(len(bins)),
                    [math.nan if by_bin.get(b) is None else by_bin[b] for b in bins],
                    marker="o", label=system)
        ax.set_xticks(range(len(bins)), [f"{b}\n({sizes.get(b, 0)})" for b in bins])
        ax.set_xlabel(f"{kind} length in words (sentences)")
        ax.set_ylabel("sacreBLEU")
        ax.set_ylim(bottom=0)
        ax.set_title(f"BLEU by {kind} length")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return _save(fig, path)


def plot_weight_histograms(rows, path):
    """Fig. 5: histograms of self-attention weights, a panel per side (rows) and layer (columns),
    a step line per system (fraction of the weights per bin, log scale). rows: dicts with system,
    side, layer, lo, hi, fraction."""
    plt = pyplot()
    sides = [s for s in ("enc", "dec") if any(r["side"] == s for r in rows)]
    layers = {s: sorted({r["layer"] for r in rows if r["side"] == s}) for s in sides}
    columns = max(len(v) for v in layers.values())
    fig, axes = plt.subplots(len(sides), columns, figsize=(3.3 * columns, 2.8 * len(sides)),
                             squeeze=False, layout="constrained")
    systems = list(dict.fromkeys(r["system"] for r in rows))
    for i, side in enumerate(sides):
        for j in range(columns):
            ax = axes[i][j]
            if j >= len(layers[side]):
                ax.axis("off")
                continue
            layer = layers[side][j]
            for system in systems:
                chosen = sorted((r["lo"], r["hi"], r["fraction"]) for r in rows
                                if (r["system"], r["side"], r["layer"]) == (system, side, layer))
                if chosen:
                    edges = [lo for lo, _, _ in chosen] + [chosen[-1][1]]
                    values = [f if f else math.nan for _, _, f in chosen]
                    ax.stairs(values, edges, label=system)
            ax.set_yscale("log")
            ax.set_title(f"{side.capitalize()}-L{layer}", fontsize=9)
            ax.set_xlabel("attention weight")
            if j == 0:
                ax.set_ylabel("fraction of weights")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.suptitle("Histogram of self-attention weights (Fig. 5)")
    return _save(fig, path)


def plot_speed_sweep(rows, path):
    """Fig. 3: decoding speed (generated tokens/s) against the batch size at a fixed beam and
    against the beam size at a fixed batch size, a line per system. rows: dicts with sweep
    ("batch" or "beam"), system, batch_size, beam, tokens_per_s."""
    plt = pyplot()
    sweeps = [s for s in ("batch", "beam") if any(r["sweep"] == s for r in rows)]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(4.4 * len(sweeps), 3.4), squeeze=False,
                             layout="constrained")
    for ax, sweep in zip(axes[0], sweeps):
        chosen = [r for r in rows if r["sweep"] == sweep]
        x_key, fixed_key = ("batch_size", "beam") if sweep == "batch" else ("beam", "batch_size")
        for system in dict.fromkeys(r["system"] for r in chosen):
            points = sorted((r[x_key], r["tokens_per_s"]) for r in chosen
                            if r["system"] == system)
            ax.plot(*zip(*points), marker="o", label=system)
        fixed = sorted({r[fixed_key] for r in chosen})
        ax.set_xlabel("batch size (sentences)" if sweep == "batch" else "beam size")
        ax.set_ylabel("decoding speed (tokens/s)")
        ax.set_title(f"{fixed_key.replace('_', ' ')} {', '.join(map(str, fixed))}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("Decoding speed (Fig. 3)")
    return _save(fig, path)


LINE_STYLES = ("-", "--", ":", "-.")


def plot_valid_curves(rows, path):
    """Validation loss against training updates, a line per system and seed, a panel per pair.
    rows: dicts with pair, system, seed, num_updates, loss (ran_lab.analysis.curves)."""
    plt = pyplot()
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    long_legend = max(len({(r["system"], r["seed"]) for r in rows if r["pair"] == pair})
                      for pair in pairs) > 8
    fig, axes = plt.subplots(1, len(pairs), squeeze=False, layout="constrained",
                             figsize=((7.4 if long_legend else 5.2) * len(pairs), 3.6))
    for ax, pair in zip(axes[0], pairs):
        runs = dict.fromkeys((r["system"], r["seed"]) for r in rows if r["pair"] == pair)
        several_seeds = len({seed for _, seed in runs}) > 1
        for i, (system, seed) in enumerate(runs):
            points = [(r["num_updates"], r["loss"]) for r in rows
                      if (r["pair"], r["system"], r["seed"]) == (pair, system, seed)]
            # the colour cycle has ten colours: lines beyond them change style, so none look alike
            ax.plot(*zip(*points), marker=".", linestyle=LINE_STYLES[i // 10 % len(LINE_STYLES)],
                    label=f"{system} (seed {seed})" if several_seeds else system)
        losses = sorted(r["loss"] for r in rows if r["pair"] == pair)
        # the first validations sit far above the rest: show the last three quarters of the range
        ax.set_ylim(losses[0] - 0.05 * (losses[-1] - losses[0]),
                    losses[min(len(losses) - 1, (3 * len(losses)) // 4)])
        ax.set_xlabel("training updates")
        ax.set_ylabel("validation loss")
        ax.set_title(pair)
        ax.grid(alpha=0.3)
        if long_legend:  # it would cover the curves: beside the panel
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
        else:
            ax.legend(fontsize="small")
    fig.suptitle("Validation loss during training")
    return _save(fig, path)


def plot_alignments(alignments, path, title):
    """Fig. 6 of Elbayad et al. (2018): a panel per sentence, generated tokens down and source
    tokens across, shaded by the weight. alignments: :class:`.alignments.Alignment` list. Weights
    (reading "share") are shaded on [0, 1]; Eq. 7's logit contributions α (reading "eq7", which
    can be negative) on a diverging scale centred at 0, symmetric over all panels."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(alignments), squeeze=False, layout="constrained",
                             figsize=(sum(0.32 * len(a.source) + 1.2 for a in alignments),
                                      0.32 * max(len(a.target) for a in alignments) + 1.6))
    eq7 = any(getattr(a, "reading", "share") == "eq7" for a in alignments)
    if eq7:
        bound = max(float(a.weights.abs().max()) for a in alignments) or 1.0
        scale, label = dict(vmin=-bound, vmax=bound, cmap="RdBu_r"), "α (Eq. 7, logit units)"
    else:
        scale, label = dict(vmin=0, vmax=1, cmap="Greys"), "weight"
    for ax, alignment in zip(axes[0], alignments):
        image = ax.imshow(alignment.weights.numpy(), **scale)
        ax.set_xticks(range(len(alignment.source)), alignment.source, rotation=90, fontsize=7)
        ax.set_yticks(range(len(alignment.target)), alignment.target, fontsize=7)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label=label)
    fig.suptitle(title)
    return _save(fig, path)


def plot_sweeps(rows, path):
    """Fig. 4 of Elbayad et al. (2018): BLEU (mean ± std over seeds) against the embedding size,
    the growth rate and the depth, a panel per parameter and a line per language pair. rows:
    :func:`ran_lab.analysis.sweeps.sweep_rows`."""
    plt = pyplot()
    panels = list(dict.fromkeys(r["panel"] for r in rows))
    fig, axes = plt.subplots(1, len(panels), squeeze=False, layout="constrained",
                             figsize=(3.4 * len(panels), 3.0), sharey=True)
    for ax, panel in zip(axes[0], panels):
        mine = [r for r in rows if r["panel"] == panel]
        for pair in dict.fromkeys(r["pair"] for r in mine):
            points = sorted((r["value"], r["bleu"], r["bleu_std"]) for r in mine
                            if r["pair"] == pair)
            xs, ys, errs = zip(*points)
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=pair)
        ax.set_xlabel(mine[0]["parameter"])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("tok BLEU")
    axes[0][-1].legend(fontsize="small")
    fig.suptitle("BLEU against embedding size, growth rate and depth (Fig. 4)")
    return _save(fig, path)
