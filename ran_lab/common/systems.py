"""Systems files (``configs/PAPER/systems.json``, ``configs/bench/*.json``): named systems, each
an architecture and its flags, one of them the baseline; and the choice of some of them.

The reproduction engine and the benchmark read the same files and check different fields (the
engine knows decoding flags, postprocessing and tables; the benchmark only arch and flags): this
module checks what both rely on and calls back for the rest.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from . import schema
from .errors import LabError


@dataclass
class Systems:
    """A systems file: its ``systems`` by name, in file order, each entry as the file holds it."""
    path: Path
    baseline: Optional[str]  # as the file names it: the caller checks it names a system
    common_flags: List[str]  # flags of every system, before its own
    systems: Dict[str, dict] = field(default_factory=dict)
    notes: Optional[str] = None


def parse_systems(spec, path, known=None,
                  check: Optional[Callable[[dict], None]] = None) -> Systems:
    """The systems of the JSON value ``spec`` of systems file ``path``: every entry of its
    ``systems`` an object with non-empty string fields 'name' and 'arch' and, where ``known`` is
    given, no field outside it; no name twice. ``check(entry)`` runs on each entry after that
    (its flags, say) and raises for what it refuses."""
    schema.check(spec, schema.SYSTEMS, path, what="systems file")
    systems = {}
    for system in spec["systems"]:
        name = system["name"]
        unknown = sorted(set(system) - set(known)) if known is not None else []
        if unknown:
            raise LabError(f"{path}: system {name!r} has unknown field(s) {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(known))})")
        if name in systems:
            raise LabError(f"{path}: system name {name!r} appears twice")
        if check is not None:
            check(system)
        systems[name] = system
    return Systems(path=Path(path), baseline=spec.get("baseline"),
                   common_flags=list(spec.get("common_flags", [])), systems=systems,
                   notes=spec.get("notes"))


def select_systems(systems, wanted, refuse, always=(), file_order=False):
    """The systems (dicts by name, in file order) that ``wanted`` names, a comma-separated list
    (all of them, in file order, where it is None): in the order it names them, each system whose
    checkpoint another decodes (its ``checkpoint_of``) just before that one unless named earlier,
    the order in which their runs start; with ``file_order``, in file order. ``always``: names
    taken whether named or not. ``refuse(names, unknown)`` returns the error to raise (or None to
    go on) given the names ``wanted`` holds and those among them that ``systems`` lacks."""
    if wanted is None:
        return list(systems.values())
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in systems]
    error = refuse(names, unknown)
    if error is not None:
        raise error
    ordered = []
    for name in names:
        for n in (systems[name].get("checkpoint_of"), name):  # a trainer before its decoders
            if n and n not in ordered:
                ordered.append(n)
    chosen = set(ordered) | set(always)
    if file_order:
        return [s for name, s in systems.items() if name in chosen]
    return [systems[n] for n in ordered] + [systems[n] for n in always if n not in ordered]
