"""The checkout's root and the names the lab gives paths and systems."""
import os
import re
from pathlib import Path

from ran_lab import checkout

REPO = checkout.ROOT
# The offline copy of Multi30k that the lab reads beside its checkout (docs/data.md): the lab's
# scripts and the engine point ran-prepare's MULTI30K_DIR at it when it is there and no other
# folder is named.
MULTI30K_MIRROR = REPO.parent / "shared" / "data" / "multi30k"


def multi30k_environment(environ=None):
    """``environ`` (default: this process's) with MULTI30K_DIR naming the mirror beside the
    checkout, where it exists and the variable is unset."""
    environ = os.environ if environ is None else environ
    if not environ.get("MULTI30K_DIR") and MULTI30K_MIRROR.is_dir():
        return {**environ, "MULTI30K_DIR": str(MULTI30K_MIRROR)}
    return dict(environ)


def repo_path(path):
    """Paths in configs are relative to the repository root."""
    path = Path(path)
    return path if path.is_absolute() else REPO / path


def shown(path):
    """``path`` relative to the repository root when it lies inside it, else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def slug(name):
    """A directory name for a system: 'RAN-ALL w/o LN&RES' -> 'RAN-ALL_w-o_LN-RES'. A name that
    leaves no folder name ('...', '', '/') is a ValueError naming it: its runs would fall into the
    pair's folder, beside (and over) another system's. (Two names of one folder are refused where
    the names are read, the reproduction's systems file.)"""
    folder = re.sub(r"[^A-Za-z0-9_-]+", "-", str(name).replace(" ", "_")).strip("-")
    if not folder.strip("_"):
        raise ValueError(f"system name {name!r} gives no folder name (it needs a letter or a "
                         f"digit): rename the system")
    return folder
