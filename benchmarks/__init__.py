"""Benchmarks: sparktimely measured side by side with its peers and the machine's limits.

Run ``scripts/bench`` (or ``python -m benchmarks``) for every section at three sizes, which
rewrites benchmarks/RESULTS.md and benchmarks/results.png; or one section, e.g.
``python -m benchmarks.bench_core``. ``pytest benchmarks/test_bench_core.py`` and
``pytest benchmarks/test_bench_wordcount.py`` run pytest-benchmark versions of the headline
figures (not part of the main test suite). Table rows share one shape: see ``_util.Row``.
"""
