"""Kernel counts: how many device kernels a training or decoding step launches.

On a GPU a small or base model's step costs about one launch per aten kernel, which a CPU hides
behind arithmetic. The count here is the number of aten operators a step dispatches, recorded with
a ``TorchDispatchMode`` on the CPU in float32, without the operators that launch nothing on a GPU:
views and aliases (``OpOverload.is_view``) and ``aten::detach``, ``aten::alias``,
``aten::_unsafe_view``, ``aten::t``, ``aten::lift_fresh``. Operators an operator calls inside its
own implementation are not seen (the mode is off while it runs), as they are one launch, or none,
on a GPU. The count is deterministic for a given model, batch and torch version.

Counts are attributed to the innermost *component* module running when the operator is
dispatched: by default the encoder, each decoder layer's ``self_attn`` and ``encoder_attn``, and
its feed-forward ``fc1``/``fc2`` (together "ffn"); everything else (beam search, cache reordering,
embeddings, layer norms, output projection) is "rest". Backward operators run after the forward's
modules have returned, so a training step's components cover its forward pass and its backward is
one figure.
"""
import collections
import contextlib
import re
from typing import Dict, Iterable, List, Optional, Tuple

import torch
# TorchDispatchMode comes from a private torch module: it is the one way to see every aten operator
# a step dispatches, which is what this counter measures. It is lab code, never loaded with the
# plugin by --user-dir, so a torch release that moves it breaks kernel counting only.
from torch.utils._python_dispatch import TorchDispatchMode

# operators that launch nothing on a GPU, beside every OpOverload.is_view
NO_LAUNCH = frozenset({"aten::detach", "aten::alias", "aten::_unsafe_view", "aten::t",
                       "aten::lift_fresh"})

# (component, regular expression over fairseq module names); the first match names the component
DEFAULT_COMPONENTS: Tuple[Tuple[str, str], ...] = (
    ("encoder", r"encoder"),
    ("self_attn", r"decoder\.layers\.\d+\.self_attn"),
    ("encoder_attn", r"decoder\.layers\.\d+\.encoder_attn"),
    ("ffn", r"decoder\.layers\.\d+\.fc[12]"),
)
REST = "rest"


def launches(func) -> bool:
    """Whether the aten operator ``func`` (an OpOverload) counts as a kernel launch."""
    if getattr(func, "is_view", False):
        return False
    return func.name().split(".")[0] not in NO_LAUNCH


class KernelCounter(TorchDispatchMode):
    """Counts launching aten operators by component while active (``with KernelCounter(model)``).

    ``counts`` maps a component to its count; ``per_module`` maps each component module's name
    (e.g. ``decoder.layers.0.self_attn``) to its own count; ``ops`` counts operator names."""

    def __init__(self, model: Optional[torch.nn.Module] = None,
                 components: Iterable[Tuple[str, str]] = DEFAULT_COMPONENTS):
        super().__init__()
        self.counts: Dict[str, int] = collections.Counter()
        self.per_module: Dict[str, int] = collections.Counter()
        self.ops: Dict[str, int] = collections.Counter()
        self._stack: List[Tuple[str, str]] = []
        self._handles = []
        self._unwrap = []
        self._model = model
        self._patterns = [(name, re.compile(p)) for name, p in components]

    def _component(self, module_name: str) -> Optional[str]:
        return next((c for c, p in self._patterns if p.fullmatch(module_name)), None)

    def _hook(self):
        for name, module in self._model.named_modules():
            component = self._component(name)
            if component is None:
                continue

            def pre(_module, _args, entry=(component, name)):
                self._stack.append(entry)

            def post(_module, _args, _out):
                self._stack.pop()

            self._handles += [module.register_forward_pre_hook(pre),
                              module.register_forward_hook(post)]
            if hasattr(module, "forward_torchscript"):
                # fairseq's beam search runs the encoder through forward_torchscript, which calls
                # forward directly, past the hooks
                self._wrap(module, "forward_torchscript", (component, name))

    def _wrap(self, module, method, entry):
        inner = getattr(module, method)

        def call(*args, **kwargs):
            self._stack.append(entry)
            try:
                return inner(*args, **kwargs)
            finally:
                self._stack.pop()

        setattr(module, method, call)
        self._unwrap.append((module, method))

    def __enter__(self):
        if self._model is not None:
            self._hook()
        return super().__enter__()

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        for module, method in self._unwrap:
            delattr(module, method)  # the instance attribute; the class's method shows again
        self._handles, self._unwrap, self._stack = [], [], []
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if launches(func):
            component, module = self._stack[-1] if self._stack else (REST, None)
            self.counts[component] += 1
            if module is not None:
                self.per_module[module] += 1
            self.ops[func.name()] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _round(counts: Dict[str, float], divisor: float) -> Dict[str, float]:
    return {k: round(v / divisor, 2) for k, v in sorted(counts.items())}


def decoding_generator(task, model, beam: int, length: int):
    """fairseq's beam search with every hypothesis forced to ``length`` tokens plus EOS (EOS is
    banned before the length and forced at it)."""
    from fairseq.dataclass.configs import GenerationConfig

    return task.build_generator(
        [model], GenerationConfig(beam=beam, min_len=length, max_len_a=0, max_len_b=length))


def python_calls(run) -> Optional[int]:
    """The Python function calls (and the built-in calls Python makes) while ``run()`` runs, as
    cProfile counts them: the host's share of a step beside its kernel launches, deterministic
    for a given code path. None where another profiler is active (it cannot be replaced)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    try:
        profile.enable()
    except ValueError:
        return None
    try:
        run()
    finally:
        profile.disable()
    return pstats.Stats(profile).total_calls


def count_decoding(task, model, sample, beam: int, length: int,
                   components=DEFAULT_COMPONENTS) -> dict:
    """Kernels per decoding step of beam search over ``sample`` with every hypothesis forced to
    ``length`` tokens plus EOS (a generate call divided by ``length``), in eval mode; beside them
    the Python calls per step (:func:`python_calls`): on a GPU whose step is bound by the host,
    the interpreter's work adds to the launches."""
    generator = decoding_generator(task, model, beam, length)
    model.eval()
    with torch.no_grad():
        task.inference_step(generator, [model], sample)  # lazy caches are built outside the count
        with KernelCounter(model, components) as counter:
            task.inference_step(generator, [model], sample)
        calls = python_calls(lambda: task.inference_step(generator, [model], sample))
    return {"unit": "per decoding step", "beam": beam, "length": length,
            "sentences": int(sample["nsentences"]),
            "total": round(counter.total / length, 2),
            "components": _round(counter.counts, length),
            "per_module": _round(counter.per_module, length),
            "python_calls": None if calls is None else round(calls / length, 2)}


def count_training(model, criterion, sample, components=DEFAULT_COMPONENTS) -> dict:
    """Kernels of one training forward and backward over ``sample`` (no optimizer step), in train
    mode; the forward by component, the backward as one figure."""
    model.train()
    model.zero_grad(set_to_none=True)
    with KernelCounter(model, components) as forward:
        loss, _, _ = criterion(model, sample)
    with KernelCounter() as backward:
        loss.backward()
    model.zero_grad(set_to_none=True)
    return {"unit": "per training step (forward + backward)",
            "sentences": int(sample["nsentences"]),
            "target_length": int(sample["target"].size(1)),
            "total": forward.total + backward.total, "forward": forward.total,
            "backward": backward.total, "components": dict(sorted(forward.counts.items()))}


@contextlib.contextmanager
def cpu_float_copy(model):
    """A float32 CPU copy of ``model`` (counts are defined there), the original untouched."""
    import copy

    clone = copy.deepcopy(model).float().cpu()
    try:
        yield clone
    finally:
        del clone
