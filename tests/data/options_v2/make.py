"""Makes the tiny checkpoints of options version 2 (the models' config dataclasses made from
option tables at run time, ``cfg.model`` saved as a dict): the checkpoints of
tests/data/options_v1/make.py (same architectures, flags and synthetic corpus, one update), the
outputs the code that saved them computes on its fixed batch (``<name>.out.pt``) and the beam
search's hypotheses of that batch's sources (``<name>.hyp.pt``). The committed files were made
by the code of options version 2; rerunning this script makes checkpoints of the current code.

    .venv/bin/python tests/data/options_v2/make.py
"""
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
import helpers  # noqa: E402

_spec = importlib.util.spec_from_file_location("options_v1_make",
                                               HERE.parent / "options_v1" / "make.py")
v1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v1)

CHECKPOINTS, SOURCE, outputs = v1.CHECKPOINTS, v1.SOURCE, v1.outputs


def hypotheses(model, task):
    """The best hypothesis (tokens) of beam search (beam 2, at most 8 tokens) for each source of
    the fixed batch."""
    from fairseq.sequence_generator import SequenceGenerator

    src = torch.tensor(SOURCE)
    generator = SequenceGenerator([model.eval()], task.target_dictionary, beam_size=2,
                                  max_len_b=8)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1)}}
    with torch.no_grad():
        return [best[0]["tokens"] for best in generator.generate([model], sample)]


def main():
    from fairseq import checkpoint_utils

    import ran_fairseq  # noqa: F401  (its models and the checkpoint allow list)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = helpers.make_synthetic_corpus(tmp / "raw", n_train=40, n_valid=4, n_test=4)
        helpers.run_cli("preprocess", ["-s", "de", "-t", "en", "--trainpref", raw / "train",
                                       "--validpref", raw / "valid", "--destdir", tmp / "bin",
                                       "--srcdict", HERE.parent / "options_v1" / "dict.de.txt",
                                       "--tgtdict", HERE.parent / "options_v1" / "dict.en.txt",
                                       "--workers", "1"])
        for name, (arch, flags) in CHECKPOINTS.items():
            if (HERE / f"{name}.out.pt").exists():
                continue
            helpers.train(tmp / "bin", tmp / name, arch, ["--no-save-optimizer-state", *flags],
                          max_update=1)
            path = HERE / f"{name}.pt"
            shutil.copy(tmp / name / "checkpoint_last.pt", path)
            models, _, task = checkpoint_utils.load_model_ensemble_and_task(
                [str(path)], arg_overrides={"data": str(tmp / "bin")})
            torch.save(outputs(models[0]), HERE / f"{name}.out.pt")
            torch.save(hypotheses(models[0], task), HERE / f"{name}.hyp.pt")
            print(name, path.stat().st_size)


if __name__ == "__main__":
    main()
