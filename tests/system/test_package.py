"""The plugin loads the ways the README says: ``--user-dir ran_fairseq`` from the checkout and
``--user-dir "$(python -m ran_fairseq)"`` from anywhere; importing it registers with fairseq
whichever of the two a program imports first, and the lab's commands import neither torch nor
fairseq."""
import json
import re
import subprocess
import sys

import pytest

import helpers
from systems import TINY_TRANSFORMER


def test_module_prints_user_dir():
    proc = subprocess.run([sys.executable, "-m", "ran_fairseq"], capture_output=True, text=True,
                          cwd="/", env=helpers.fairseq_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == helpers.USER_DIR


def test_relative_user_dir_from_checkout(synthetic_databin, tmp_path):
    args = helpers.train_args(synthetic_databin, tmp_path, "transformer", TINY_TRANSFORMER, max_update=1)
    args[args.index("--user-dir") + 1] = "ran_fairseq"
    proc = helpers.run_cli("train", [*args, "--no-save"], cwd=helpers.REPO, fresh=True)
    log = proc.stdout + proc.stderr
    assert "num_updates 1" in log or "num_updates=1" in log


def test_plugin_registers_with_fairseq():
    import ran_fairseq  # noqa: F401
    from fairseq.scoring import SCORER_REGISTRY

    assert "ter" in SCORER_REGISTRY


# In a fresh interpreter: what is registered, and whether a meta-path finder was added.
_PROBE = """
import json, sys
finders = len(sys.meta_path)
{setup}
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.scoring import SCORER_REGISTRY
print(json.dumps({{"arch": "ran_transformer" in ARCH_MODEL_REGISTRY,
                  "ter": "ter" in SCORER_REGISTRY, "finders": len(sys.meta_path) - finders}}))
"""


@pytest.mark.parametrize("setup", [
    "import ran_fairseq",  # the plugin first: it imports fairseq
    "import fairseq; import ran_fairseq",  # as fairseq-train --user-dir loads it
    "import ran_fairseq.models",  # a subpackage imports the package first
])
def test_importing_the_plugin_registers(setup):
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(setup=setup)], capture_output=True,
                          text=True, cwd="/", env=helpers.fairseq_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "arch": True, "ter": True, "finders": 0}


# In a fresh interpreter: fairseq and its commands imported, every attribute of their modules and
# classes (and of sys, the warning filters and the root logger) noted, then the plugin imported:
# the names whose value changed.
_CHANGES = """
import importlib, inspect, json, logging, sys, warnings
import fairseq
for name in ("fairseq_cli.train", "fairseq_cli.generate", "fairseq_cli.interactive",
             "fairseq.trainer", "fairseq.checkpoint_utils", "fairseq.distributed.utils",
             "fairseq.data.indexed_dataset", "fairseq.data.data_utils", "fairseq.file_io",
             "fairseq.models.distributed_fairseq_model", "fairseq.tasks.fairseq_task"):
    importlib.import_module(name)


def state():
    seen = {}
    for mod_name, module in list(sys.modules.items()):
        if not (mod_name.split(".")[0] in ("fairseq", "fairseq_cli") and module is not None
                and getattr(module, "__name__", None) == mod_name):  # not an alias's entry
            continue
        for attr, value in list(vars(module).items()):
            seen[f"{mod_name}.{attr}"] = id(value)
            if inspect.isclass(value) and value.__module__ == mod_name:
                for cattr, cvalue in list(vars(value).items()):
                    seen[f"{mod_name}.{attr}.{cattr}"] = id(cvalue)
    for attr, value in list(vars(sys).items()):
        seen[f"sys.{attr}"] = id(value)
    seen["sys.meta_path[]"] = [id(f) for f in sys.meta_path]
    seen["warnings.filters[]"] = [repr(f) for f in warnings.filters]
    root = logging.getLogger()
    seen["logging.root[]"] = [root.level, [id(h) for h in root.handlers]]
    return seen


before = state()
import ran_fairseq
after = state()
print(json.dumps(sorted(k for k in before if after.get(k) != before[k])))
"""


@pytest.mark.parametrize("requested", ["", "all"])
def test_importing_the_plugin_changes_only_the_listed_fixes(requested):
    """``import ran_fairseq`` replaces exactly the attributes ``ran_fairseq.fixes.FIXES`` lists
    for the default fixes, and for the opt-in ones only where RAN_FAIRSEQ_FIXES asks; nothing of
    sys (its excepthook, the meta path), the warning filters or the root logger changes."""
    from ran_fairseq import fixes

    env = helpers.fairseq_env()
    env["RAN_FAIRSEQ_FIXES"] = requested
    proc = subprocess.run([sys.executable, "-c", _CHANGES], capture_output=True, text=True,
                          cwd="/", env=env)
    assert proc.returncode == 0, proc.stderr
    changed = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    listed = {name for fix in fixes.FIXES if fix.default or requested == "all"
              for name in fix.replaces}
    assert changed == listed


def test_an_unknown_fix_is_named():
    from ran_fairseq import fixes

    with pytest.raises(ValueError, match="RAN_FAIRSEQ_FIXES='keep_last'.*keep_last_batch"):
        fixes.requested({"RAN_FAIRSEQ_FIXES": "keep_last"})
    assert [f.name for f in fixes.requested({"RAN_FAIRSEQ_FIXES": "keep_last_batch"})] == [
        "keep_last_batch"]


def test_the_lab_imports_neither_torch_nor_fairseq():
    """The lab's commands that never use fairseq start without importing it (about 3 s on 2
    cores), and so do the plugin's tools beside fairseq (ran-prepare, ran-evaluate)."""
    modules = ["ran_text", "ran_text.textio", "ran_text.tied", "ran_text.prepare.cli",
               "ran_text.evaluate", "ran_text.replace_unk", "ran_text.unk_dictionary",
               "ran_text.tokenization", "ran_lab", "ran_lab.reproduce.cli",
               "ran_lab.claims.cli", "ran_lab.remake", "ran_lab.bench.cli",
               "ran_lab.analysis.cli", "ran_lab.gpucheck.cli", "ran_lab.run_fairseq"]
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in ('torch', 'fairseq', 'ran_fairseq') "
            "if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                          env=helpers.fairseq_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_pitfalls_lists_every_fix_with_its_kind():
    """docs/pitfalls.md's table names each fix of ran_fairseq.fixes.FIXES with its kind."""
    from ran_fairseq import fixes

    text = (helpers.REPO / "docs" / "pitfalls.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (default|opt-in) \|", text, re.M))
    assert rows == {fix.name: "default" if fix.default else "opt-in" for fix in fixes.FIXES}


def test_pitfalls_names_what_the_import_registers():
    """docs/pitfalls.md's first paragraph names the criterions, learning-rate schedulers and
    optimizers the plugin registers, and claims none it does not register."""
    import ran_fairseq  # noqa: F401
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.optim import OPTIMIZER_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY

    text = (helpers.REPO / "docs" / "pitfalls.md").read_text()
    section = text[text.index("## What importing the plugin changes in fairseq"):]
    first = section[:section.index("\n\n", section.index("`import ran_fairseq`"))]
    for kind, registry in (("criterion", CRITERION_REGISTRY), ("scheduler", LR_SCHEDULER_REGISTRY),
                           ("optimizer", OPTIMIZER_REGISTRY)):
        ours = [name for name, cls in registry.items() if cls.__module__.startswith("ran_fairseq.")]
        for name in ours:
            assert f"`{name}`" in first, (kind, name)
        if not ours:
            assert kind not in first, f"docs/pitfalls.md says the plugin registers a {kind}"
