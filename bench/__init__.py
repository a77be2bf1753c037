"""Benchmarks: each prints its figures; run with `python -m bench.NAME`."""
