"""One system's benchmark, in a process of its own: training and decoding timings, memory probes,
the decoding breakdown, GPU launches and kernel counts.

The harness starts ``python -m ran_lab.bench.worker SPEC.json``: SPEC.json holds the
system, its fairseq-train command line and the settings of WORKER_SETTINGS; the worker writes its
result as JSON to the spec's ``result_path`` and, on a LabError, exits with the message on
stderr, which the harness shows.
"""
import json
import os
import re
import resource
import statistics
import sys
import time
from pathlib import Path

from .settings import BREAKDOWN_PARTS, BREAKDOWN_SHARE
from ran_lab.common import LabError


class MemoryProbe:
    """Peak memory of one phase, in MiB, and its increment over the memory in use at the start.

    CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; fairseq's
    ``Trainer.train_step`` resets the peak itself after every update, so while a phase runs that
    reset first records the peak it would drop. CPU: the
    resident set high-water mark (VmHWM), reset at the phase start by writing 5 to
    /proc/self/clear_refs; where the kernel refuses, the process-lifetime peak (ru_maxrss).
    """

    def __init__(self, cuda):
        self.cuda = cuda
        self.before = None
        self.peak_resettable = None
        self.dropped_peak = 0.0  # CUDA: the largest peak that a reset during the phase dropped
        self._reset = None

    def start(self):
        import gc

        gc.collect()
        if self.cuda:
            self._start_cuda()
            return
        release_free_heap()
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.peak_resettable = True
        except OSError:
            self.peak_resettable = False
        self.before = current_rss_mib()

    def _start_cuda(self):
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.before = torch.cuda.memory_allocated() / 2**20
        self.dropped_peak = 0.0
        self._reset = torch.cuda.reset_peak_memory_stats

        def keep_peak_then_reset(*args, **kwargs):
            self.dropped_peak = max(self.dropped_peak, torch.cuda.max_memory_allocated())
            self._reset(*args, **kwargs)

        torch.cuda.reset_peak_memory_stats = keep_peak_then_reset

    def stop(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats = self._reset
            peak = max(self.dropped_peak, torch.cuda.max_memory_allocated()) / 2**20
        elif self.peak_resettable:
            peak = proc_status_kib("VmHWM") / 1024
        else:
            peak = max_rss_mib()
        return {"mem_before_mib": self.before, "mem_peak_mib": peak,
                "mem_increment_mib": peak - self.before,
                "mem_peak_since_phase_start": self.cuda or self.peak_resettable}


def proc_status_kib(field):
    m = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1))


def max_rss_mib():
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, else KiB


def current_rss_mib():
    if Path("/proc/self/status").is_file():
        return proc_status_kib("VmRSS") / 1024
    return max_rss_mib()


def release_free_heap():
    """Return freed heap pages to the OS (glibc malloc_trim) so RSS shows what is in use."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# ----------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------

def train_batches(trainer, count):
    """The first ``count`` training batches in fairseq's order, starting new epochs as needed."""
    epoch_itr = trainer.get_train_iterator(epoch=1, load_dataset=True)
    batches = []
    while len(batches) < count:
        trainer.begin_epoch(epoch_itr.next_epoch_idx)
        before = len(batches)
        for sample in epoch_itr.next_epoch_itr(shuffle=True):
            batches.append(sample)
            if len(batches) == count:
                break
        if len(batches) == before:
            raise LabError("the training set yields no batches; check --data and "
                             "--max-tokens")
    return batches


def decode_batches(task, model, subset, n, batch_size, seed):
    """The first ``n`` sentences of ``subset`` (by index), batched as fairseq-generate batches
    them: sorted by length, at most ``batch_size`` sentences per batch."""
    from fairseq import utils
    from fairseq.data import data_utils

    task.load_dataset(subset, combine=False, epoch=1)
    dataset = task.dataset(subset)
    n = min(n, len(dataset))
    if n == 0:
        raise LabError(f"the {subset!r} split of --data is empty; pick another --gen-subset")
    with data_utils.numpy_seed(seed):
        order = dataset.ordered_indices()
    order = order[order < n]
    max_positions = utils.resolve_max_positions(task.max_positions(), model.max_positions())
    order, ignored = dataset.filter_indices_by_size(order, max_positions)
    if len(ignored):
        raise LabError(f"{len(ignored)} of the first {n} sentences of {subset!r} are longer "
                         f"than the model allows ({max_positions}); lower --decode-sentences "
                         f"or pick another --gen-subset")
    return [dataset.collater([dataset[i] for i in batch])
            for batch in dataset.batch_by_size(order, max_sentences=batch_size)]


# ----------------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------------

def decode_breakdown(task, generator, model, samples, clock):
    """Seconds of one more decoding pass over ``samples`` spent in each of BREAKDOWN_PARTS and
    BREAKDOWN_SHARE (parts a model does not have are absent), and in the whole pass."""
    import torch

    parts = {}
    started = {}

    def timed(part, key):
        def pre(*_):
            started[key] = clock()

        def post(*_):
            parts[part] = parts.get(part, 0.0) + clock() - started.pop(key)
        return pre, post

    def timed_call(method, pre, post):
        def call(*args, **kwargs):
            pre()
            try:
                return method(*args, **kwargs)
            finally:
                post()
        return call

    patterns = [(part, re.compile(p)) for part, p in BREAKDOWN_PARTS + [BREAKDOWN_SHARE] if p]
    handles = []
    for name, module in model.named_modules():
        part = next((part for part, p in patterns if p.fullmatch(name)), None)
        if part is not None:
            pre, post = timed(part, name)
            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    wrapped = [(model.encoder, "forward_torchscript", "encoder"),
               (model.decoder, "reorder_incremental_state_scripting", "cache reorder")]
    for owner, method, part in wrapped:
        setattr(owner, method, timed_call(getattr(owner, method), *timed(part, method)))
    try:
        start = clock()
        with torch.no_grad():
            for sample in samples:
                task.inference_step(generator, [model], sample)
        total = clock() - start
    finally:
        for handle in handles:
            handle.remove()
        for owner, method, _ in wrapped:
            delattr(owner, method)  # the instance attribute; the class's method shows again
    timed_parts = sum(v for k, v in parts.items() if k != BREAKDOWN_SHARE[0])
    return {"pass_seconds": total, "parts_seconds": dict(parts, rest=total - timed_parts)}


def generation_config(spec, length):
    """Beam search as fairseq-generate runs it; a forced ``length``: min = max length, so EOS is
    banned before it and forced at it."""
    from fairseq.dataclass.configs import GenerationConfig

    if length:
        return GenerationConfig(beam=spec["beam"], min_len=length, max_len_a=0, max_len_b=length)
    return GenerationConfig(beam=spec["beam"], max_len_a=spec["max_len_a"],
                            max_len_b=spec["max_len_b"])


def timed_decoding(task, model, samples, spec, length, clock, memory):
    """One untimed warm-up batch, then ``decode_repeats`` timed passes over ``samples``."""
    import torch

    generator = task.build_generator([model], generation_config(spec, length))
    memory.start()
    with torch.no_grad():
        task.inference_step(generator, [model], samples[0])  # untimed warm-up batch
        passes = []
        for _ in range(spec["decode_repeats"]):
            start = clock()
            sentences = generated = 0
            for sample in samples:
                hypos = task.inference_step(generator, [model], sample)
                sentences += len(hypos)
                generated += sum(len(h[0]["tokens"]) for h in hypos)
            passes.append(clock() - start)
        seconds = statistics.median(passes)
    return ({"sentences": sentences, "generated_tokens": generated, "batches": len(samples),
             "seconds": seconds, "pass_seconds": passes, "sentences_per_s": sentences / seconds,
             "tokens_per_s": generated / seconds, **memory.stop()}, generator)


def cuda_launches_per_step(task, model, sample, beam, length):
    """Kernels the GPU ran (torch.profiler's CUDA kernel events) in one decoding batch forced to
    ``length`` tokens, divided by ``length``: the launches that kernel counts stand for."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ran_lab.bench.kernels import decoding_generator

    generator = decoding_generator(task, model, beam, length)
    with torch.no_grad():
        task.inference_step(generator, [model], sample)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            task.inference_step(generator, [model], sample)
            torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"kernels": kernels, "per_step": round(kernels / length, 2)}


def kernel_counts(task, model, criterion, sample, spec):
    """--count-kernels: ran_lab/bench/kernels.py's counts on a float32 CPU copy."""
    from fairseq import utils

    from ran_lab.bench import kernels

    task.load_dataset(spec["count_subset"], combine=False, epoch=1)
    dataset = task.dataset(spec["count_subset"])
    n = min(spec["count_sentences"], len(dataset))
    train_sample = dataset.collater([dataset[i] for i in range(n)])
    with kernels.cpu_float_copy(model) as copy:
        decoding = kernels.count_decoding(task, copy, utils.move_to_cpu(sample), spec["beam"],
                                          spec["decode_length"])
        training = kernels.count_training(copy, criterion, train_sample)
    return {"decoding": decoding, "training": training}


# ----------------------------------------------------------------------------------------------
# One system: set up as fairseq-train does, train, decode
# ----------------------------------------------------------------------------------------------

def setup(spec):
    """Task, model, criterion and Trainer as fairseq_cli.train.main sets up a run."""
    from ran_lab import plugin

    plugin.load()  # as the engine's fairseq-train has it
    import numpy as np
    from fairseq import options, tasks, utils
    from fairseq.dataclass.initialize import add_defaults
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, spec["argv"]))
    utils.import_user_module(cfg.common)
    add_defaults(cfg)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    params = sum(p.numel() for p in model.parameters())
    return task, criterion, params, Trainer(cfg, task, model, criterion)


def timed_training(trainer, spec, clock, memory):
    """``train_updates`` timed updates after the untimed ones (and, with warm_shapes, one untimed
    update on each timed batch)."""
    batches = train_batches(trainer, spec["warmup_updates"] + spec["train_updates"])
    memory.start()
    timed = batches[spec["warmup_updates"]:]
    untimed = batches[:spec["warmup_updates"]] + (timed if spec.get("warm_shapes") else [])
    for sample in untimed:
        trainer.train_step([sample])
    start = clock()
    for sample in timed:
        trainer.train_step([sample])
    seconds = clock() - start
    tokens = sum(int(s["ntokens"]) for s in timed)
    return {"updates": len(timed), "target_tokens": tokens,
            "sentences": sum(int(s["nsentences"]) for s in timed), "seconds": seconds,
            "tokens_per_s": tokens / seconds, **memory.stop()}


def load_checkpoint(model, spec):
    """--checkpoint: the trained weights replace the benchmark's."""
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(spec["checkpoint"])
    try:
        model.load_state_dict(state["model"], strict=True)
    except RuntimeError as e:
        raise LabError(f"system {spec['name']!r}: {spec['checkpoint']} does not fit the "
                         f"model its flags build (the systems file's arch and flags, and "
                         f"common_flags, must be those it was trained with):\n{e}") from None


def decoding_extras(task, model, criterion, samples, spec, clock, memory):
    """Decoding at --also-decode-lengths, --cuda-launches and --count-kernels, where asked."""
    lengths = ([spec["decode_length"]] if spec.get("decode_length") else []) \
        + list(spec.get("also_decode_lengths") or [])
    at_length = {}
    for n in lengths[1:]:
        other, _ = timed_decoding(task, model, samples, spec, n, clock, memory)
        at_length[str(n)] = {k: other[k] for k in ("sentences_per_s", "tokens_per_s", "seconds",
                                                   "pass_seconds", "mem_peak_mib")}
    extra = {}
    if at_length:
        extra["decode_at_length"] = at_length
    if spec.get("cuda_launches") and spec["device"] == "cuda":
        extra["cuda_launches"] = {str(n): cuda_launches_per_step(task, model, samples[0],
                                                                 spec["beam"], n)
                                  for n in lengths}
    if spec.get("count_kernels"):
        extra["kernels"] = kernel_counts(task, model, criterion, samples[0], spec)
    return extra


def run_worker(spec):
    import torch
    from fairseq import utils

    torch.set_num_threads(spec["threads"])
    cuda = spec["device"] == "cuda"

    def clock():
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    task, criterion, params, trainer = setup(spec)
    memory = MemoryProbe(cuda)
    train = timed_training(trainer, spec, clock, memory)

    # Decoding: the trained model alone, without optimizer state or gradients.
    model = trainer.model
    criterion_for_count = criterion if spec.get("count_kernels") else None
    del trainer, criterion
    if spec.get("checkpoint"):
        load_checkpoint(model, spec)
    model.zero_grad(set_to_none=True)
    model.eval()
    samples = decode_batches(task, model, spec["gen_subset"], spec["decode_sentences"],
                             spec["decode_batch_size"], spec["seed"])
    if cuda:
        samples = [utils.move_to_cuda(s) for s in samples]
    decode, generator = timed_decoding(task, model, samples, spec, spec.get("decode_length"),
                                       clock, memory)
    if spec.get("decode_breakdown"):
        decode["breakdown"] = decode_breakdown(task, generator, model, samples, clock)
    extra = decoding_extras(task, model, criterion_for_count, samples, spec, clock, memory)
    result = worker_result(spec, params, train, decode, extra)
    Path(spec["result_path"]).write_text(json.dumps(result, indent=2))


def worker_result(spec, params, train, decode, extra):
    """The result the harness reads: figures, timings, extras and the worker's environment."""
    import fairseq
    import torch

    cuda = spec["device"] == "cuda"
    metrics = {"params": params, "train_tokens_per_s": train["tokens_per_s"],
               "decode_sentences_per_s": decode["sentences_per_s"],
               "decode_tokens_per_s": decode["tokens_per_s"],
               "train_mem_peak_mib": train["mem_peak_mib"],
               "train_mem_increment_mib": train["mem_increment_mib"],
               "decode_mem_peak_mib": decode["mem_peak_mib"],
               "decode_mem_increment_mib": decode["mem_increment_mib"]}
    return {"name": spec["name"], "arch": spec["arch"], "flags": spec["flags"],
            "fairseq_argv": spec["argv"], "metrics": metrics, "train": train, "decode": decode,
            **extra,
            "environment": {"torch": torch.__version__, "fairseq": fairseq.__version__,
                            "cuda": torch.version.cuda if cuda else None,
                            "cuda_device": torch.cuda.get_device_name() if cuda else None,
                            "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_")}}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) != 1:
            raise LabError("usage: python -m ran_lab.bench.worker SPEC.json (run by "
                             "the harness)")
        run_worker(json.loads(Path(argv[0]).read_text()))
    except LabError as e:
        sys.exit(f"bench.py: error: {e}")


if __name__ == "__main__":
    main()
