"""Benchmark pieces: kernel counts (:mod:`.kernels`)."""
