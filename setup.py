"""ran_fairseq: a fairseq --user-dir plugin with four attention architectures for NMT.

Install from a checkout with ``make setup`` (``scripts/setup-env.sh``): fairseq builds C
extensions that need torch, numpy and cython at build time, so they are installed first and the
package is installed with ``pip install --no-build-isolation``.
"""
from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="ran_fairseq",
    version="0.1.0",
    description="Recurrent and pervasive attention architectures for fairseq (--user-dir plugin)",
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=find_packages(include=["ran_fairseq", "ran_fairseq.*"]),
    install_requires=[
        # An exact pin: a bare or open-ended torch requirement makes pip fetch a multi-GB CUDA build.
        "torch==2.13.0",
        # fairseq's compiled extensions and some of its code predate NumPy 2.
        "numpy<2",
        # PyPI's fairseq 0.12.2 does not install on Python >= 3.11; fairseq-fixed is 0.12.2 patched.
        "fairseq-fixed==0.12.3.1; python_version >= '3.11'",
        "fairseq==0.12.2; python_version < '3.11'",
        "sacrebleu>=2.0",
        "subword-nmt>=0.3.8",
        "sacremoses>=0.0.53",
        # Language identification for `prepare --lang-filter` (Yang et al. 2017's WMT data). Its
        # 0.3+ releases require NumPy 2, so under the pin above pip installs 0.2.2.
        "py3langid>=0.2.2",
    ],
    # matplotlib: the analyses' plots (ran_fairseq/analysis), exercised by the tests; ruff: `make lint`;
    # pytest-xdist: `make test` runs the test files on every core (up to 4), which halves the suite
    # on 2 cores.
    # The lab's commands (each also `python -m` its module, and `scripts/` keeps thin entry points).
    entry_points={"console_scripts": [
        "ran-prepare = ran_fairseq.data.prepare.cli:main",
        "ran-reproduce = ran_fairseq.lab.reproduce.cli:main",
        "ran-bench = ran_fairseq.lab.bench.cli:main",
        "ran-claims = ran_fairseq.lab.claims.cli:main",
        "ran-analyze = ran_fairseq.analysis.cli:main",
        "ran-remake = ran_fairseq.lab.remake:main",
        "ran-evaluate = ran_fairseq.scoring.evaluate:main",
    ]},
    extras_require={"test": ["pytest>=7", "pytest-xdist>=3", "matplotlib>=3.5", "ruff>=0.4"],
                    "plot": ["matplotlib>=3.5"],
                    "align": ["eflomal>=2.0,<3"]},
)
