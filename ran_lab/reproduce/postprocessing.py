"""The post-processing steps a system may name, a registry of the code: a systems file's
``"postprocess"`` is a step's name (``"replace_unk"``) or an object naming it with its typed
parameters (``{"step": "replace_unk", "method": "dictionary"}``), never a module or an argv. Each
step is the module of the project it runs and the arguments the code builds from its
parameters, with the run's files as placeholders (:class:`~.runs.Run` fills them in)."""
from ..common import schema
from ran_lab.common import LabError

# the run's files and names a step's arguments are made of (filled in per run and subset)
FIELDS = ("generate", "output", "data", "src", "tgt", "raw_src", "raw_ref", "subset")


def replace_unk(method="copy"):
    """Unknown-word replacement (``ran_text.replace_unk``) of fairseq-generate's output, made with
    --print-alignment: ``copy`` writes the attended source word, ``dictionary`` its most probable
    translation learned from the data-bin's training corpus (Yang et al. 2017)."""
    learned = (["--method", "dictionary", "--data", "{data}", "--src", "{src}", "--tgt", "{tgt}"]
               if method == "dictionary" else [])
    return ["ran_text.replace_unk", *learned, "--generate-output", "{generate}",
            "--source", "{data}/{subset}.tok.{src}", "--output", "{output}"]


# name -> (the function making the step's argv, the schema of its parameters)
STEPS = {
    "replace_unk": (replace_unk, {"method": schema.Str(choices=("copy", "dictionary"))}),
}

EXAMPLE = '"postprocess": "replace_unk" or {"step": "replace_unk", "method": "dictionary"}'


def template(declared, where):
    """The argv (``python -m`` and its arguments, with :data:`FIELDS` as placeholders) of a
    systems file's ``postprocess`` (``where``: the file and system, for the error); one line
    saying what to write when it is not a step of :data:`STEPS` with its parameters."""
    if isinstance(declared, list):
        raise LabError(f"{where}: \"postprocess\" names a step of the engine, not a module and "
                         f"its arguments: write {EXAMPLE} (steps: {', '.join(STEPS)})")
    if isinstance(declared, str):
        declared = {"step": declared}
    if not isinstance(declared, dict):
        raise LabError(f"{where}: \"postprocess\": expected a step's name or an object naming "
                         f"one ({EXAMPLE}), found {schema.found(declared)}")
    name = declared.get("step")
    if name not in STEPS:
        raise LabError(f"{where}: \"postprocess\": {schema.found(name)} is not a step of the "
                         f"engine; the steps: {', '.join(STEPS)}")
    make, params = STEPS[name]
    schema.check(declared, schema.Obj(required={"step": schema.Str()}, optional=params), where,
                 "postprocess")
    return make(**{k: v for k, v in declared.items() if k != "step"})
