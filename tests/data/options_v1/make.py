"""Makes the tiny checkpoints of tests/test_option_versions.py: one per architecture, trained for
one update on the synthetic corpus of tests/helpers.py, and the outputs the code that saved them
computes on a fixed batch (``<name>.out.pt``). The committed files were made by options version 1
of every architecture (before the options carried a version number); rerunning this script makes
checkpoints of the current version instead.

    .venv/bin/python tests/data/options_v1/make.py
"""
import shutil
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
import helpers  # noqa: E402

TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "8",
        "--decoder-embed-dim", "8", "--encoder-ffn-embed-dim", "8", "--decoder-ffn-embed-dim", "8",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
CHECKPOINTS = {
    "ran_transformer": ("ran_transformer_small", TINY + ["--max-attention-positions", "20"]),
    "ran_transformer_ffn": ("ran_transformer_small",
                            TINY + ["--max-attention-positions", "20", "--ran-transition", "ffn",
                                    "--ran-ffn-dim", "6", "--ran-decoder-initial", "full",
                                    "--encoder-self-attention", "gaussian"]),
    "recurrent_cross_transformer": ("recurrent_cross_transformer_small",
                                    TINY + ["--cross-attention", "expand-kv", "--kv-variant", "2"]),
    "rnnsearch_dynmem": ("rnnsearch_dynmem_small",
                         ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8",
                          "--decoder-embed-dim", "8", "--decoder-hidden-size", "8",
                          "--decoder-out-embed-dim", "8", "--dynamic-memory-dim", "4",
                          "--dynamic-memory-window", "1"]),
    "pervasive_attention": ("pervasive_attention_small",
                            ["--num-layers", "2", "--growth-rate", "4", "--encoder-embed-dim", "8",
                             "--decoder-embed-dim", "8", "--gated-convolutions", "both",
                             "--aggregator", "max-attn"]),
}
SOURCE = [[5, 6, 7, 8, 2], [1, 9, 10, 11, 2]]  # the second left-padded, as fairseq batches them
TARGET = [[2, 12, 13, 14, 15], [2, 16, 17, 18, 1]]


def outputs(model):
    src = torch.tensor(SOURCE)
    tgt = torch.tensor(TARGET)
    with torch.no_grad():
        return model.eval()(src, src.ne(1).sum(1), tgt)[0]


def main():
    from fairseq import checkpoint_utils

    import ran_fairseq  # noqa: F401  (its models and the checkpoint allow list)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = helpers.make_synthetic_corpus(tmp / "raw", n_train=40, n_valid=4, n_test=4)
        data = helpers.binarize(raw, tmp / "bin")
        for name, (arch, flags) in CHECKPOINTS.items():
            if (HERE / f"{name}.out.pt").exists():
                continue
            helpers.train(data, tmp / name, arch, ["--no-save-optimizer-state", *flags],
                          max_update=1)
            path = HERE / f"{name}.pt"
            shutil.copy(tmp / name / "checkpoint_last.pt", path)
            models, _ = checkpoint_utils.load_model_ensemble([str(path)])
            torch.save(outputs(models[0]), HERE / f"{name}.out.pt")
            for suffix in ("dict.de.txt", "dict.en.txt"):
                shutil.copy(data / suffix, HERE / suffix)
            print(name, path.stat().st_size)


if __name__ == "__main__":
    main()
