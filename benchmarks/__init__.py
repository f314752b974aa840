"""Benchmark scripts that print figures (not timed tests): ``python -m benchmarks.scale --help``."""
