#!/usr/bin/env bash
# The GPU check in one job that ends by a deadline (ran_lab/gpucheck):
#   scripts/gpu-check.sh SECONDS|@EPOCH OUT [--device cpu] [--steps tests,training,speed]
#                        [--systems A,B] [--dtypes float32,float16] [--updates N] [--plan]
# In order of importance, each step started only with time left for it:
#   tests     every device-aware test on the GPU (pytest --device cuda): gradcheck of each
#             hand-written backward in float64, incremental == full forward, padding and batch
#             invariance, beam reordering, for every architecture and variant
#   training  every system with a hand-written backward and one of each other architecture,
#             trained 200 updates in float32, float16 and bfloat16, a dozen at a time
#             (configs/gpu-check.json): finite and falling losses, validation loss near float32's
#   speed     scripts/gpu-speed.sh ran-base,ran-base-100,recurrent-cross with the time left
# OUT receives check.json, CHECK.md and small logs, never checkpoints. --plan prints the trainings
# and their estimated time and runs nothing. Exit status 1 when a check failed. On a node without
# a package index: scripts/offline-gpu.sh run WHEELS -- scripts/gpu-check.sh @DEADLINE OUT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
exec "${PYTHON:-python3}" -m ran_lab.gpucheck "$@"
