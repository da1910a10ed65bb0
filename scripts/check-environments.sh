#!/usr/bin/env bash
# Measure the support table: build the oldest, one middle and the newest supported combination of
# Python, torch and NumPy in fresh virtual environments under FOLDER, from the package index and
# with an empty pip configuration (a machine's pip settings may cap torch), build fairseq-fixed
# from source in each, install this checkout, run the fast tests and the conformance suite, and
# write the versions pip installed, the build times and the test counts to results/environments/
# (README.md, environments.json). It runs outside `make test`: each environment downloads a torch
# (gigabytes for a CUDA build) and builds fairseq.
#   scripts/check-environments.sh /scratch/envs                    # all three, then the table
#   scripts/check-environments.sh --only newest --reuse /scratch/envs   # test a built one again
#   scripts/check-environments.sh --dry-run /scratch/envs          # print the commands
# Options: --only NAME (oldest, middle, newest; repeatable), --reuse, --python VERSION=PATH,
# --out DIR, --suites fast,conformance, --pytest-args ARGS, --jobs N, --dry-run (--help: all).
# PYTHON=exe: the interpreter that runs this driver (default: python3; the standard library only).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "${PYTHON:-python3}" "$here/check_environments.py" "$@"
