"""The GPU check (scripts/gpu-check.sh): what only a CUDA device can show, in one job with a
deadline. In order: the device-aware tests (gradcheck of every hand-written backward in float64,
the model-level conformance checks) on the device; short trainings of every system with a custom
backward in float32, float16 and bfloat16 (configs/gpu-check.json); the speed reruns of
scripts/gpu-speed.sh with the time left. A report (check.json, CHECK.md) is written after each
step, so a job cut off by its limit leaves what it measured."""
