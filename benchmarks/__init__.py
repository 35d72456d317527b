"""The benchmark scripts and their shared harness; run a script as ``python -m benchmarks.bench_NAME``."""
