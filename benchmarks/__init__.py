"""Benchmarks: sparktimely measured side by side with its peers and the machine's limits.

Run ``python -m benchmarks`` for every table (and benchmarks/RESULTS.md), or one script,
e.g. ``python -m benchmarks.bench_core``. ``pytest benchmarks`` runs the pytest-benchmark
versions of the headline figures.
"""
