"""One (pair, system, seed) of a reproduction: its folders and the fairseq commands it runs."""
import json
from pathlib import Path

from ..common import paths
from ..common.flags import flag_pairs, set_flag
from ..common.paths import repo_path, shown, slug

# a config's select -> the checkpoint file decoded; "bleu" also adds fairseq's validation BLEU
# (selection_flags)
SELECT = {"last": "checkpoint_last.pt", "loss": "checkpoint_best.pt", "bleu": "checkpoint_best.pt"}


class Run:
    """Commands and paths of one (pair, system, seed)."""

    def __init__(self, args, config, pair, system, data, seed):
        src, tgt = pair
        self.pair, self.src, self.tgt, self.system, self.seed = f"{src}-{tgt}", src, tgt, system, seed
        self.data = data
        self.table_dir = Path(args.out)  # the folder of the run's table
        self.dir = self.table_dir / self.pair / slug(system["name"]) / f"seed{seed}"
        trained = system["checkpoint_of"] or system["name"]
        self.save_dir = Path(args.checkpoints) / self.pair / slug(trained) / f"seed{seed}"
        self.trains = system["checkpoint_of"] is None
        self.checkpoint = self.save_dir / SELECT[config["select"]]
        self.lock_fds = ()  # the open lock files of its folders, once locked (lock_runs)
        # the same (pair, system, seed) of the config this one continues (its 'continues')
        cont = config.get("continues")
        self.continues = None if cont is None else {
            "config": cont["config"],
            "save_dir": repo_path(cont["checkpoints"]) / self.pair / slug(trained) / f"seed{seed}",
            "dir": repo_path(cont["out"]) / self.pair / slug(trained) / f"seed{seed}"}
        # the commands name the checkout's files relative to it (they run in it), so a record
        # of them is the same in every checkout; a file outside it by its absolute path
        user_dir = paths.REPO / "ran_fairseq"  # the plugin, in the checkout the engine runs in
        common = [shown(data), "--user-dir", shown(user_dir), "--task", "translation",
                  "--source-lang", src, "--target-lang", tgt]
        device = ["--cpu"] if config["device"] == "cpu" else []
        train_flags = config["train_flags"]
        if args.max_update is not None:
            train_flags = set_flag(train_flags, "--max-update", args.max_update)
        bpe = config.get("bpe", "subword_nmt")
        generate_flags = config["generate_flags"] + system["generate_flags"]
        self.train_argv = (common + ["--arch", system["arch"], "--save-dir", shown(self.save_dir)]
                           + device + train_flags + system["flags"] + ["--seed", str(seed)]
                           + selection_flags(config["select"], generate_flags, bpe, tgt))
        self.subsets = config["subsets"]
        self.generate_argv, self.raw_src, self.raw_ref, self.tok_ref = {}, {}, {}, {}
        self.output, self.post_output, self.hyp_file, self.postprocess = {}, {}, {}, {}
        self.kept_output = {}
        for subset in self.subsets:
            suffix = "" if subset == self.subsets[0] else f".{subset}"
            self.generate_argv[subset] = (
                common + ["--path", shown(self.checkpoint), "--gen-subset", subset,
                          "--required-batch-size-multiple", "1"]
                + (["--post-process", bpe] if bpe else []) + device + generate_flags)
            self.raw_src[subset] = Path(data) / f"{subset}.raw.{src}"
            self.raw_ref[subset] = Path(data) / f"{subset}.raw.{tgt}"
            self.tok_ref[subset] = Path(data) / f"{subset}.tok.{tgt}"
            self.output[subset] = self.dir / f"generate{suffix}.txt"
            # a postprocessed run keeps what decoding printed, gzip'd, so that the postprocess
            # can be redone without the checkpoint (ran_fairseq.scoring.redo_unk)
            self.kept_output[subset] = self.dir / f"generate{suffix}.txt.gz"
            self.post_output[subset] = self.dir / f"generate{suffix}.post.txt"
            self.hyp_file[subset] = self.dir / f"hyp.detok{suffix}.txt"
            self.postprocess[subset] = None
            if system["postprocess"]:
                fields = {"generate": shown(self.output[subset]),
                          "output": shown(self.post_output[subset]), "data": shown(data),
                          "src": src, "tgt": tgt, "raw_src": shown(self.raw_src[subset]),
                          "raw_ref": shown(self.raw_ref[subset]), "subset": subset}
                self.postprocess[subset] = [part.format(**fields)
                                            for part in system["postprocess"]]

    def __getstate__(self):
        # a run sent to another process (its Slurm job) holds none of this one's lock files
        return dict(self.__dict__, lock_fds=())

    def commands(self):
        cmds = [["fairseq-train"] + self.train_argv] if self.trains else []
        for subset in self.subsets:
            cmds.append(["fairseq-generate"] + self.generate_argv[subset])
            if self.postprocess[subset]:
                cmds.append(["python", "-m"] + self.postprocess[subset])
        return cmds

    def recorded(self):
        """What makes a stored result this run's: every command it runs."""
        return {"train": self.train_argv, "generate": self.generate_argv,
                "postprocess": self.postprocess}


def selection_flags(select, generate_flags, bpe, tgt):
    """fairseq-train flags that make ``checkpoint_best.pt`` the best checkpoint by validation BLEU
    (fairseq's ``--eval-bleu``: the validation set decoded with the config's beam and length
    settings, detokenized with Moses, BPE removed); none for ``last`` and ``loss`` (fairseq keeps
    ``checkpoint_best.pt`` by validation loss by default)."""
    if select != "bleu":
        return []
    gen = flag_pairs(generate_flags)
    args = {"beam": int(gen.get("--beam", 5))}
    for flag, key, kind in (("--lenpen", "lenpen", float), ("--max-len-a", "max_len_a", float),
                            ("--max-len-b", "max_len_b", int)):
        if flag in gen:
            args[key] = kind(gen[flag])
    flags = ["--eval-bleu", "--eval-bleu-args", json.dumps(args, sort_keys=True),
             "--eval-bleu-detok", "moses",
             "--eval-bleu-detok-args", json.dumps({"target_lang": tgt}),
             "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]
    if bpe:
        flags += ["--eval-bleu-remove-bpe", "@@ "]
    return flags
