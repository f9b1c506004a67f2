"""Operators on partially ordered times: a dataflow whose times are ``Product(a, b)``.

Updates come at arbitrary points of a 3x3 grid of times; the output accumulated to each grid
time must equal the operator applied to the inputs accumulated to that time (everything at
times component-wise ``<=``). This exercises join's ``t1.join(t2)`` output times and reduce's
interesting times (an output may change at ``(1, 1)`` with inputs only at ``(0, 1)`` and
``(1, 0)``)."""
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from dd_harness import (accumulate, counts_and_distinct, join_pairs, run_product_times,
                        tagged_counts_and_distinct)
from sparktimely import Product

SETTINGS = settings(max_examples=15, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
GRID = [Product(a, b) for a in range(3) for b in range(3)]
times = hs.sampled_from(GRID)
diffs = hs.sampled_from([1, 1, -1])


def updates_of(data):
    return hs.lists(hs.tuples(data, times, diffs), max_size=10)


def check(build, oracle, inputs, run):
    output = run_product_times(build, inputs, run)
    for time in GRID:
        expected = {k: v for k, v in oracle(*[accumulate(i, time) for i in inputs]).items() if v}
        got = accumulate(output, time)
        assert got == expected, f"at {time} on {run.workers} worker(s): got {got}, expected {expected}"


@pytest.mark.timeout(120)
@SETTINGS
@given(left=updates_of(hs.tuples(hs.integers(0, 2), hs.sampled_from("xy"))),
       right=updates_of(hs.tuples(hs.integers(0, 2), hs.sampled_from("uv"))))
def test_join_at_product_times(run, left, right):
    check(lambda scope, a, b: a.join(b), join_pairs, [left, right], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(data=updates_of(hs.integers(0, 3)))
def test_count_and_distinct_at_product_times(run, data):
    check(lambda scope, c: tagged_counts_and_distinct(c), counts_and_distinct, [data], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(data=updates_of(hs.tuples(hs.integers(0, 2), hs.integers(0, 3))))
def test_reduce_at_product_times(run, data):
    def smallest(key, values, output):
        output.append((values[0][0], 1))

    def oracle(c):
        best: dict = {}
        for (k, v), n in c.items():
            if n > 0:
                best[k] = min(best.get(k, v), v)
        return Counter({(k, v): 1 for k, v in best.items()})
    check(lambda scope, c: c.reduce(smallest), oracle, [data], run)


def test_reduce_output_at_a_join_of_input_times(run):
    """Inputs only at (0, 1) and (1, 0); the count is 2 only from (1, 1) on, so the
    operator must emit there although no input has that time."""
    data = [("a", Product(0, 1), 1), ("a", Product(1, 0), 1)]
    output = run_product_times(lambda scope, c: c.count(), [data], run)
    assert sorted(output) == [(("a", 1), Product(0, 1), 1), (("a", 1), Product(1, 0), 1),
                              (("a", 1), Product(1, 1), -2), (("a", 2), Product(1, 1), 1)]
