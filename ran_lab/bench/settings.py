"""What the harness, its workers and its report agree on: the flags the harness owns,
the figures and their headings, the decoding parts the breakdown times, the settings a worker
reads and the columns of a speed sweep."""

# Flags the harness sets itself; a systems file that sets them would be silently overridden.
RESERVED_FLAGS = {
    "--arch": "the system's 'arch' field",
    "-a": "the system's 'arch' field",
    "--task": "nothing (the benchmark is for --task translation)",
    "--user-dir": "nothing (the harness loads ran_fairseq)",
    "--source-lang": "bench.py --source-lang",
    "-s": "bench.py --source-lang",
    "--target-lang": "bench.py --target-lang",
    "-t": "bench.py --target-lang",
    "--max-tokens": "bench.py --max-tokens",
    "--seed": "bench.py --seed",
    "--cpu": "bench.py --device",
}

# Flags of a reproduction config (--train-flags-of) that the benchmark leaves out besides
# RESERVED_FLAGS: they name files, logging or the end of training, none of which a timed step uses.
NOT_BENCHED_FLAGS = {"--save-dir", "--max-update", "--max-epoch", "--log-format",
                     "--log-interval", "--no-epoch-checkpoints", "--num-workers",
                     "--best-checkpoint-metric", "--maximize-best-checkpoint-metric"}

# (key in a result's "metrics", table heading, format); memory headings get the memory kind.
METRICS = [
    ("params", "params", "{:,.0f}"),
    ("train_tokens_per_s", "train tok/s", "{:,.1f}"),
    ("decode_sentences_per_s", "decode sent/s", "{:,.2f}"),
    ("decode_tokens_per_s", "decode tok/s", "{:,.1f}"),
    ("train_mem_peak_mib", "train peak {mem} (MiB)", "{:,.1f}"),
    ("train_mem_increment_mib", "train Δ{mem} (MiB)", "{:,.1f}"),
    ("decode_mem_peak_mib", "decode peak {mem} (MiB)", "{:,.1f}"),
    ("decode_mem_increment_mib", "decode Δ{mem} (MiB)", "{:,.1f}"),
]
MEMORY_KINDS = {"cuda": "CUDA alloc", "cpu": "RSS"}

# --decode-breakdown: the decoding parts timed, matched on module names of fairseq's transformer
# decoder layers (and of the plugin's models built on them). The first parts do not overlap; the
# value/output projections are a share of the self-attention. "rest" is all else: beam search,
# embeddings, layer norms.
BREAKDOWN_PARTS = [
    ("encoder", None),  # timed around encoder.forward_torchscript, which bypasses module hooks
    ("self-attention", r"decoder\.layers\.\d+\.self_attn"),
    ("cross-attention", r"decoder\.layers\.\d+\.encoder_attn"),
    ("feed-forward", r"decoder\.layers\.\d+\.fc[12]"),
    ("output projection", r"decoder\.output_projection"),
    ("cache reorder", None),  # timed around decoder.reorder_incremental_state_scripting
]
BREAKDOWN_SHARE = ("self-attention value/output projections",
                   r"decoder\.layers\.\d+\.self_attn\.(v_proj|out_proj)")

# --live-memory: every allocation of 64 KiB or more is mapped and unmapped on its own, so the
# resident set follows the live tensors (glibc's default threshold grows up to 32 MiB and keeps
# freed tensors in the heap).
LIVE_MEMORY_MMAP_THRESHOLD = 65536

# The settings each worker reads from its spec.
WORKER_SETTINGS = ("train_updates", "warmup_updates", "beam", "decode_batch_size",
                   "decode_sentences", "decode_repeats", "gen_subset", "max_len_a", "max_len_b",
                   "decode_length", "seed", "decode_breakdown", "also_decode_lengths",
                   "count_kernels", "count_sentences", "count_subset", "cuda_launches",
                   "warm_shapes")
SWEEP_FIELDS = ["sweep", "system", "batch_size", "beam", "sentences", "generated_tokens",
                "mean_seconds", "tokens_per_s", "sentences_per_s", "passes"]
