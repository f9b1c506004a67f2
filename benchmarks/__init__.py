"""Benchmarks: sparktimely measured side by side with its peers and the machine's limits.

Run ``scripts/bench`` (or ``python -m benchmarks``) for every section at three sizes, which
rewrites benchmarks/RESULTS.md and benchmarks/results.png; or one section, e.g.
``python -m benchmarks.bench_core``. ``pytest benchmarks/test_bench_core.py`` and
``pytest benchmarks/test_bench_wordcount.py`` run pytest-benchmark versions of the headline
figures (not part of the main test suite). Table rows share one shape: see ``_util.Row``.
"""
import os

# pyarrow's allocator (mimalloc) hands freed memory back to the kernel 10 ms after a free. On
# this kind of machine (a VM whose host reclaims the memory its guest frees) faulting it in
# again costs 5-9 ms per 2 MB page, so a load repeated in one worker took 12 or 17 ms by
# chance. The benchmarks keep freed memory for reuse, as a long-running worker finds it; the
# variable is read when pyarrow loads, hence here, before any benchmark imports pyarrow.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")

