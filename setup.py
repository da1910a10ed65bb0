"""ran_fairseq: a fairseq --user-dir plugin with four attention architectures for NMT.

Install from a checkout with ``make setup`` (``scripts/setup-env.sh``, the exact versions of
``requirements-lock.txt``), or into an environment that already has torch and numpy with
``pip install --no-build-isolation .``: fairseq builds C extensions against the installed torch,
numpy and cython.
"""
from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="ran_fairseq",
    version="0.1.0",
    description="Recurrent and pervasive attention architectures for fairseq (--user-dir plugin)",
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    # The ranges below are those scripts/check-environments.sh builds and tests (its last table:
    # results/environments/). The demo and CI install the exact versions of requirements-lock.txt.
    python_requires=">=3.10",
    # Three top-level packages (docs/houses.md): ran_fairseq, what fairseq loads (importing it
    # registers the architectures); ran_text, what a user of the plugin runs beside fairseq and
    # which needs neither torch nor fairseq (data preparation, scoring, text files); ran_lab, the
    # reproduction lab (engine, claims, benchmark, analyses), which imports the other two and
    # which neither of them imports.
    packages=find_packages(include=["ran_fairseq", "ran_fairseq.*", "ran_text", "ran_text.*",
                                    "ran_lab", "ran_lab.*"]),
    # fairseq-hydra-train's configs of the models (--config-dir "$(python -m ran_fairseq.config)")
    package_data={"ran_fairseq.config": ["*.yaml"]},
    install_requires=[
        # The oldest torch tested; `pip install .` into an environment that has a torch in range
        # keeps it (no second multi-GB CUDA build).
        "torch>=2.5.1,<3",
        "numpy>=1.26,<3",
        # fairseq 0.12.2 with packaging fixes; PyPI's fairseq 0.12.2 installs on none of the
        # supported Pythons (no wheel, and its sdist lacks C++ sources). Built from source against
        # the installed torch and numpy (pip install --no-build-isolation).
        "fairseq-fixed>=0.12.3.1,<0.13",
        "sacrebleu>=2.0",
        "subword-nmt>=0.3.8",
        "sacremoses>=0.0.53",
        # the lab's markdown tables (ran_lab/tables.py)
        "tabulate>=0.9,<0.11",
        # Student's t of the claims' intervals (ran_lab/claims/seeds.py)
        "scipy>=1.10,<2",
    ],
    # matplotlib: the analyses' plots (ran_lab/analysis), exercised by the tests; ruff: `make lint`;
    # pytest-xdist (3.6 for --no-loadscope-reorder): `make test` runs the test files on every core (up
    # to 4) in the order tests/conftest.py gives, which halves the suite
    # on 2 cores.
    # The lab's commands (each also `python -m` its module, and `scripts/` keeps thin entry points).
    entry_points={"console_scripts": [
        "ran-prepare = ran_text.prepare.cli:main",
        "ran-reproduce = ran_lab.reproduce.cli:main",
        "ran-bench = ran_lab.bench.cli:main",
        "ran-claims = ran_lab.claims.cli:main",
        "ran-analyze = ran_lab.analysis.cli:main",
        "ran-remake = ran_lab.remake:main",
        "ran-evaluate = ran_text.evaluate:main",
    ]},
    # py3langid: `ran-prepare --lang-filter` (Yang et al. 2017's WMT data). An extra, not a
    # requirement: its 0.3+ releases require NumPy 2, and pip would upgrade a NumPy 1.26 (and
    # break fairseq's extensions built against it) to install the newest; with the NumPy pinned
    # (pip's -c) it installs 0.2.2.
    extras_require={"test": ["pytest>=7", "pytest-xdist>=3.6", "matplotlib>=3.5", "ruff>=0.4",
                             "submitit>=1.4", "py3langid>=0.2.2"],
                    "langid": ["py3langid>=0.2.2"],
                    "plot": ["matplotlib>=3.5"],
                    # ran-reproduce --launcher slurm
                    "slurm": ["submitit>=1.4"],
                    # replace_unk --method dictionary (Yang et al.'s UNK replacement)
                    "align": ["eflomal>=2.0,<3"]},
)
