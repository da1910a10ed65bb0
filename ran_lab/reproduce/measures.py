"""Measurements a paper adds to each scored run (a :class:`~.config.Paper`'s ``measure``)."""
# Fig. 6 of Elbayad et al. (2018): the test sentences whose alignments are drawn
FIGURE_SENTENCES = 3


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def pervasive_measure(run, result):
    """Table 2's columns for Pervasive Attention systems: the parameter count with the masked
    half of each k×k kernel (the paper's count), and the mean forward FLOPs per test sentence
    pair; Fig. 6 for Table 1 systems with an informative alignment."""
    if not result["arch"].startswith("pervasive_attention"):
        return {}
    from ran_lab.analysis import checkpoints
    from ran_lab.analysis.alignments import decoded_alignments
    from ran_lab.analysis.plots import plot_alignments

    argv = run.generate_argv[run.subsets[0]]
    task, model = checkpoints.load_checkpoint(str(run.checkpoint), str(run.data))
    subset = flag_value(argv, "--gen-subset")
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    pairs = list(zip(dataset.src_sizes.tolist(), dataset.tgt_sizes.tolist()))
    flops = sum(model.complexity(s, t)["flops"] for s, t in pairs) / len(pairs)
    measured = {"params_dense_kernels": model.complexity(1, 1, include_masked_weights=True)
                ["parameters"], "gflops_per_sentence": flops / 1e9}
    if "1" in result["tables"] and model.decoder.aggregator.kind != "avg":
        png = run.dir / "alignments.png"
        beam = int(flag_value(argv, "--beam") or 5)
        plot_alignments(decoded_alignments(task, model, subset, FIGURE_SENTENCES, beam), png,
                        f"{run.pair} {run.system['name']}: implicit alignments (Fig. 6)")
        measured["alignment_png"] = str(png.relative_to(run.table_dir))
    return measured


def unk_method(result):
    """The unknown-word replacement method of a result ('' for a run without one): its record's,
    else read from its command (``--method``; ``--dictionary`` alone meant the dictionary, neither
    the copy). A column of Yang et al.'s table (configs/dynmem/reproduce.json)."""
    post = result.get("postprocess") or []
    if not post or post[0] != "ran_text.replace_unk":
        return ""
    for scores in (result.get("subsets") or {}).values():
        record = scores.get("postprocess_record") or {}
        if record.get("method"):
            return record["method"]
    if "--method" in post[:-1]:
        return post[post.index("--method") + 1]
    return "dictionary" if "--dictionary" in post else "copy"


# What a paper file may name (configs/PAPER/reproduce.json): its "measure", called after each
# system is scored, and the "compute" of a table column; a new one is an entry here.
MEASURES = {"pervasive": pervasive_measure}
COLUMNS = {"unk_method": unk_method}
