"""The board's plan (``configs/leaderboard/board.json``): which scale config it runs, which seeds
each direction and each system gets, where its page goes, and how its cost is measured.

The file holds

- ``config``: the engine's scale config (``configs/leaderboard/cpu.json``): systems, data, recipe,
  budget, and ``out``, the folder of the runs (``results/leaderboard/cpu``: a folder named
  ``runs`` is the git-ignored scratch folder);
- ``page``: the folder of the board's page (``results/leaderboard``): TABLE.md, leaderboard.json,
  the plot, CLAIMS.md and CLAIMS.json of the pairwise verdicts, cost.json;
- ``seeds``: the seeds of every system per direction, ``{"de-en": [1, 2, 3], "en-de": [1, 2]}``,
  the directions in the order their runs start;
- ``seeds_of`` (optional): a system's own seeds where it gets fewer, ``{SYSTEM: {PAIR: [..]}}``;
  its runs start after the other systems' of the direction;
- ``cost``: how the cost columns are measured (``pair``, ``seed``: the checkpoints timed;
  ``train_updates``: the updates of each timed training; ``threads``: the thread counts decoding
  is timed at, ``"all"`` for every core);
- ``why``: a sentence per choice (``budget``, ``seeds_of``) that the page prints.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

from ran_text import textio
from ran_lab.common import LabError, schema
from ..common.paths import repo_path

BOARD = "configs/leaderboard/board.json"
MAX_LOAD = 1.0  # the load average above which the cost command does not measure (--max-load)


@dataclass
class Group:
    """One engine invocation: a direction, its seeds and the systems run with them."""
    pair: str
    seeds: List[int]
    systems: List[str]


@dataclass
class Board:
    path: Path
    config: str
    page: str
    seeds: Dict[str, List[int]]
    seeds_of: Dict[str, Dict[str, List[int]]]
    cost: dict
    why: Dict[str, str] = field(default_factory=dict)

    @property
    def pairs(self) -> List[str]:
        return list(self.seeds)

    def seeds_for(self, system: str, pair: str) -> List[int]:
        return self.seeds_of.get(system, {}).get(pair, self.seeds[pair])

    def groups(self, systems: List[str]) -> List[Group]:
        """The engine invocations, in the order the runs start: per direction, the systems with
        the direction's seeds (seed by seed), then each system of ``seeds_of`` with its own."""
        out = []
        for pair, seeds in self.seeds.items():
            common = [s for s in systems if pair not in self.seeds_of.get(s, {})]
            if common:
                out.append(Group(pair, list(seeds), common))
            for system in systems:
                own = self.seeds_of.get(system, {}).get(pair)
                if own is not None and own:
                    out.append(Group(pair, list(own), [system]))
        return out

    def planned(self, systems: List[str]) -> List[Tuple[str, str, int]]:
        """Every (pair, system, seed) the board makes."""
        return [(g.pair, s, seed) for g in self.groups(systems) for seed in g.seeds
                for s in g.systems]


def load_board(path=None) -> Board:
    path = Path(path) if path else repo_path(BOARD)
    data = schema.check(textio.read_json_file(path, "the board's plan"), schema.BOARD, path,
                        "the board's plan")
    seeds, seeds_of, cost = data["seeds"], data.get("seeds_of", {}), data["cost"]
    if not seeds:
        raise LabError(f"{path}: 'seeds' maps each direction to its seeds")
    for system, by_pair in seeds_of.items():
        if set(by_pair) - set(seeds):
            raise LabError(f"{path}: seeds_of {system!r} maps directions of 'seeds' "
                           f"({', '.join(seeds)}) to seeds, not {by_pair!r}")
    if cost["pair"] not in seeds:
        raise LabError(f"{path}: 'cost' has a pair of 'seeds' ({', '.join(seeds)}), not "
                       f"{cost['pair']!r}")
    return Board(path, data["config"], data["page"], seeds, seeds_of, cost, data.get("why", {}))
