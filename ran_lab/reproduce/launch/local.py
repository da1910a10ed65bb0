"""``--launcher local``: a run is made in this engine's process, its fairseq commands as the
engine's children, ``--jobs`` runs at a time."""
import functools

from ...common.machine import machine_info
from ran_lab.common import LabError
from ..execute import finished_result
from . import Outcome


class Local:
    """The runs made here, on the machine the config names (``cuda`` needs a GPU torch sees)."""

    def __init__(self, config, jobs, threads, env, paper, config_path):
        self.config, self.jobs, self.threads = config, jobs, threads
        self.env, self.paper, self.config_path = env, paper, config_path
        self.machine = functools.lru_cache(maxsize=None)(self._machine)

    def workers(self, runs):
        return self.jobs

    def _machine(self):
        """The machine record of this invocation's runs; an error where the config trains on a
        GPU and torch sees none."""
        if self.config["device"] == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise LabError(f"{self.config_path} trains on a GPU and torch sees none; use "
                                 f"--dry-run to print the commands, or the CPU config")
        return dict(machine_info(self.config["device"], self.threads), jobs=self.jobs)

    def check(self):
        self.machine()

    def launch(self, run, trained, stopped, say):
        machine = self.machine()
        say(f"{run.pair} {run.system['name']} seed {run.seed} ...")
        return Outcome(finished_result(run, self.env, trained, self.paper.measure, machine))
