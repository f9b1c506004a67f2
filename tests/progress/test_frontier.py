"""Antichain, MutableAntichain, ChangeBatch and Product."""
import pickle
import random

import pytest

import sparktimely as st
from sparktimely.progress import less_equal, less_than
from sparktimely import Antichain, ChangeBatch, MutableAntichain, Product


# -- Antichain -----------------------------------------------------------------------------

def test_antichain_int_keeps_minimum():
    a = Antichain()
    assert len(a) == 0
    assert a.elements() == []
    assert a.insert(5) is True
    assert a.insert(7) is False          # 5 <= 7
    assert a.insert(5) is False          # already there
    assert a.insert(3) is True           # replaces 5
    assert a.elements() == [3]
    assert list(a) == [3]
    assert len(a) == 1
    assert a.less_equal(3) and a.less_equal(4)
    assert not a.less_equal(2)
    assert a.less_than(4)
    assert not a.less_than(3)


def test_antichain_constructor_takes_minimal_elements():
    assert Antichain([4, 2, 9]).elements() == [2]
    a = Antichain([Product(2, 0), Product(0, 2), Product(3, 3), Product(1, 1)])
    assert sorted(a.elements()) == [Product(0, 2), Product(1, 1), Product(2, 0)]


def test_antichain_product_incomparable_elements():
    a = Antichain([Product(1, 0), Product(0, 1)])
    assert len(a) == 2
    assert a.insert(Product(1, 1)) is False
    assert a.insert(Product(2, 5)) is False
    assert a.less_equal(Product(2, 0))
    assert a.less_equal(Product(0, 1))
    assert not a.less_than(Product(0, 1))
    assert a.less_than(Product(0, 2))
    assert not a.less_equal(Product(0, 0))
    # inserting the minimum replaces both
    assert a.insert(Product(0, 0)) is True
    assert a.elements() == [Product(0, 0)]


def test_antichain_equality_ignores_order():
    a = Antichain([Product(1, 0), Product(0, 1)])
    b = Antichain([Product(0, 1), Product(1, 0)])
    assert a == b
    assert a == [Product(0, 1), Product(1, 0)]
    assert a != Antichain([Product(0, 1)])
    assert Antichain() == Antichain()
    assert Antichain([3]) != Antichain([4])


def test_antichain_random_matches_brute_force():
    rng = random.Random(7)
    for _ in range(200):
        times = [Product(rng.randrange(5), rng.randrange(5)) for _ in range(rng.randrange(1, 8))]
        a = Antichain()
        for t in times:
            a.insert(t)
        expected = {t for t in times if not any(u.less_than(t) for u in times)}
        assert set(a.elements()) == expected
        assert len(a) == len(expected)
        for probe in [Product(x, y) for x in range(6) for y in range(6)]:
            assert a.less_equal(probe) == any(t.less_equal(probe) for t in times)
            assert a.less_than(probe) == any(t.less_than(probe) for t in times)


# -- MutableAntichain --------------------------------------------------------------------------

def test_mutable_antichain_timely_doctest():
    frontier = MutableAntichain()
    assert frontier.update_iter([(1, 1)]) == [(1, 1)]
    assert frontier.frontier() == [1]
    changes = frontier.update_iter([(1, -1), (2, 7)])
    assert changes == [(1, -1), (2, 1)]
    assert frontier.frontier() == [2]
    assert frontier.count_for(2) == 7
    assert frontier.count_for(1) == 0


def test_mutable_antichain_empty():
    m = MutableAntichain()
    assert m.is_empty()
    assert m.frontier() == []
    assert not m.less_equal(0)
    assert not m.less_than(10 ** 9)
    assert m.update_iter([]) == []


def test_mutable_antichain_counts_and_no_spurious_changes():
    m = MutableAntichain()
    assert m.update_iter([(3, 2)]) == [(3, 1)]
    assert m.update_iter([(3, -1)]) == []     # still positive
    assert m.update_iter([(5, 1)]) == []      # not in the frontier
    assert m.count_for(3) == 1 and m.count_for(5) == 1
    assert m.update_iter([(3, -1)]) == [(3, -1), (5, 1)]
    assert m.update(5, -1) == [(5, -1)]
    assert m.is_empty()
    assert m.update_iter([(4, 0)]) == []


def test_mutable_antichain_transient_negative_counts():
    m = MutableAntichain()
    # A decrement that arrives before its increment.
    assert m.update_iter([(4, -1)]) == []
    assert m.count_for(4) == -1
    assert m.is_empty()
    assert m.frontier() == []
    assert not m.less_equal(4)
    assert m.update_iter([(6, 1)]) == [(6, 1)]
    assert m.frontier() == [6]            # the negative count at 4 does not count
    assert m.update_iter([(4, 1)]) == []  # back to zero: nothing happens
    assert m.count_for(4) == 0
    assert m.frontier() == [6]
    assert m.update_iter([(4, 2)]) == [(6, -1), (4, 1)]
    assert m.frontier() == [4]


def test_mutable_antichain_negative_then_positive_in_one_call():
    m = MutableAntichain()
    assert m.update_iter([(2, -1), (2, 1), (3, 1)]) == [(3, 1)]
    assert m.frontier() == [3]
    assert m.count_for(2) == 0


def test_mutable_antichain_product_incomparable_frontier():
    m = MutableAntichain()
    changes = m.update_iter([(Product(2, 0), 1), (Product(0, 2), 1), (Product(1, 1), 1),
                             (Product(3, 3), 1)])
    assert sorted(changes) == [(Product(0, 2), 1), (Product(1, 1), 1), (Product(2, 0), 1)]
    assert sorted(m.frontier()) == [Product(0, 2), Product(1, 1), Product(2, 0)]
    assert m.less_equal(Product(1, 5))
    assert not m.less_equal(Product(0, 1))
    assert m.less_than(Product(2, 1))
    assert not m.less_than(Product(2, 0))
    assert not m.less_than(Product(1, 0))
    # removing (1, 1) exposes nothing new: (3, 3) is still dominated by (2, 0)
    assert m.update(Product(1, 1), -1) == [(Product(1, 1), -1)]
    assert sorted(m.frontier()) == [Product(0, 2), Product(2, 0)]
    # removing (2, 0) and (0, 2) exposes (3, 3)
    changes = m.update_iter([(Product(2, 0), -1), (Product(0, 2), -1)])
    assert sorted(changes) == [(Product(0, 2), -1), (Product(2, 0), -1), (Product(3, 3), 1)]
    assert m.frontier() == [Product(3, 3)]
    # a new minimum replaces everything
    changes = m.update(Product(0, 0), 1)
    assert sorted(changes) == [(Product(0, 0), 1), (Product(3, 3), -1)]


def test_mutable_antichain_random_against_brute_force():
    rng = random.Random(11)
    for trial in range(60):
        m = MutableAntichain()
        counts = {}
        frontier = set()
        for _ in range(30):
            batch = []
            for _ in range(rng.randrange(1, 5)):
                t = Product(rng.randrange(4), rng.randrange(4))
                d = rng.choice([-1, 1, 1, 2])
                batch.append((t, d))
            # keep the final counts non-negative
            after = dict(counts)
            for t, d in batch:
                after[t] = after.get(t, 0) + d
            for t, c in list(after.items()):
                if c < 0:
                    batch.append((t, -c))
                    after[t] = 0
            changes = m.update_iter(batch)
            counts = {t: c for t, c in after.items() if c}
            positive = [t for t, c in counts.items() if c > 0]
            new_frontier = {t for t in positive if not any(u.less_than(t) for u in positive)}
            expected = sorted([(t, -1) for t in frontier - new_frontier]
                              + [(t, 1) for t in new_frontier - frontier])
            assert sorted(changes) == expected
            assert set(m.frontier()) == new_frontier
            frontier = new_frontier
            for t in counts:
                assert m.count_for(t) == counts[t]



@pytest.mark.parametrize("make", [lambda rng: rng.randrange(6),
                                  lambda rng: Product(rng.randrange(4), rng.randrange(4))],
                         ids=["int", "product"])
def test_mutable_antichain_single_updates_against_brute_force(make):
    """``update`` (the tracker's one-change path) reports exactly the changes between the
    frontiers of positive counts before and after, counts going transiently negative
    included."""
    rng = random.Random(12)
    for trial in range(80):
        m = MutableAntichain()
        counts: dict = {}
        frontier: set = set()
        for _ in range(40):
            t, d = make(rng), rng.choice([-2, -1, 1, 1, 2])
            changes = m.update(t, d)
            counts[t] = counts.get(t, 0) + d
            positive = [u for u, c in counts.items() if c > 0]
            new_frontier = {u for u in positive if not any(v.less_than(u) if
                                                           isinstance(v, Product) else v < u
                                                           for v in positive)}
            expected = sorted([(u, -1) for u in frontier - new_frontier]
                              + [(u, 1) for u in new_frontier - frontier])
            assert sorted(changes) == expected
            assert set(m.frontier()) == new_frontier and len(m.frontier()) == len(new_frontier)
            frontier = new_frontier

def test_mutable_antichain_int_heap_against_brute_force():
    """Integer times also wait in a heap (its stale entries dropped at its top, the heap
    rebuilt when stale ones pile up): long runs over few times, through ``update``,
    ``update_iter`` and pickling, keep the frontier of positive counts exactly."""
    rng = random.Random(5)
    for trial in range(20):
        m = MutableAntichain()
        counts: dict = {}
        for step in range(2000):
            if rng.random() < 0.2:
                pairs = [(rng.randrange(8), rng.choice([-2, -1, 1, 2])) for _ in range(3)]
                m.update_iter(pairs)
            else:
                pairs = [(rng.randrange(8), rng.choice([-2, -1, 1, 1, 2]))]
                m.update(*pairs[0])
            for t, d in pairs:
                counts[t] = counts.get(t, 0) + d
            if step % 500 == 499:
                m = pickle.loads(pickle.dumps(m))
            positive = [t for t, c in counts.items() if c > 0]
            assert m.frontier() == ([min(positive)] if positive else [])


class _CountingDict(dict):
    scans = 0

    def items(self):
        _CountingDict.scans += 1
        return super().items()


def test_mutable_antichain_drains_int_times_without_scanning_the_counts():
    """Retracting the least of many pending int times finds the next one in the heap: draining
    n times in order was a look at every count per time, n squared (20,000 records at times of
    their own took 4.3 s to drain after their input closed)."""
    m = MutableAntichain()
    for t in range(1000):
        m.update(t, 1)
    m._counts = _CountingDict(m._counts)
    _CountingDict.scans = 0
    for t in range(1000):
        assert m.update(t, -1) == ([(t, -1), (t + 1, 1)] if t < 999 else [(t, -1)])
    assert _CountingDict.scans == 0


# -- ChangeBatch ------------------------------------------------------------------------------

def test_change_batch_update_and_drain():
    b = ChangeBatch()
    assert b.is_empty()
    b.update(5, 1)
    b.update(3, 2)
    b.update(5, -1)
    assert not b.is_empty()
    assert b.drain() == [(3, 2)]
    assert b.is_empty()
    assert b.drain() == []


def test_change_batch_extend_compact_and_cancellation():
    b = ChangeBatch()
    b.extend([("x", 1), ("y", 2), ("x", -1), ("z", -3)])
    b.compact()
    assert sorted(b) == [("y", 2), ("z", -3)]
    assert len(b) == 2
    b.extend([("y", -2), ("z", 3)])
    assert b.is_empty()
    assert b.drain() == []


def test_change_batch_drain_sorted_and_clears():
    b = ChangeBatch()
    b.extend([(9, 1), (1, 1), (4, -2), (1, 1)])
    assert b.drain() == [(1, 2), (4, -2), (9, 1)]
    assert b.is_empty()
    b.update(Product(1, 0), 1)
    b.update(Product(0, 1), 1)
    assert sorted(b.drain()) == [(Product(0, 1), 1), (Product(1, 0), 1)]
    assert b.is_empty()


# -- Product ----------------------------------------------------------------------------------

def test_product_partial_order():
    assert Product(1, 2).less_equal(Product(1, 3))
    assert not Product(1, 2).less_equal(Product(0, 3))
    assert Product(1, 2).less_equal(Product(1, 2))
    assert not Product(1, 2).less_than(Product(1, 2))
    assert Product(1, 2).less_than(Product(2, 2))
    assert Product(0, 5).less_than(Product(1, 5))
    # incomparable
    assert not Product(1, 0).less_equal(Product(0, 1))
    assert not Product(0, 1).less_equal(Product(1, 0))
    # module-level helpers agree
    assert less_equal(Product(0, 1), Product(0, 2))
    assert less_than(Product(0, 1), Product(0, 2))
    assert not less_than(Product(0, 1), Product(0, 1))
    assert less_equal(3, 3) and not less_than(3, 3) and less_than(2, 3)


def test_product_total_order_extends_partial_order():
    assert Product(2, 0) > Product(1, 9)
    assert Product(1, 9) < Product(2, 0)
    assert Product(1, 1) <= Product(1, 1) and Product(1, 1) >= Product(1, 1)
    items = [Product(a, b) for a in range(3) for b in range(3)]
    rng = random.Random(3)
    shuffled = items[:]
    rng.shuffle(shuffled)
    assert sorted(shuffled) == items
    for x in items:
        for y in items:
            if x.less_equal(y):
                assert x <= y


def test_product_equality_and_hash():
    assert Product(1, 2) == Product(1, 2)
    assert Product(1, 2) != Product(2, 1)
    assert Product(1, 2) != (1, 2)
    assert hash(Product(1, 2)) == hash(Product(1, 2))
    d = {Product(1, 2): "a", Product(2, 1): "b"}
    assert d[Product(1, 2)] == "a"
    assert len({Product(0, 0), Product(0, 0), Product.minimum()}) == 1


def test_products_of_integers_made_again_are_the_same_object(monkeypatch):
    """Times of two integer coordinates are interned (the tracker's lookups then meet the
    very object); others are not (a user type's equality is its own); a full table starts
    over, and a time made before and one made after stay equal, hash alike and find each
    other in a dict; unpickled times are interned too."""
    from sparktimely.progress import timestamp

    class Step:                         # a user inner coordinate, equal by its value alone
        def __init__(self, value: int, note: str) -> None:
            self.value, self.note = value, note

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Step) and other.value == self.value

        def __hash__(self) -> int:
            return hash(self.value)

    assert Product(3, 7) is Product(3, 7)
    assert pickle.loads(pickle.dumps(Product(3, 7))) is Product(3, 7)
    first, second = Product(1, Step(2, "a")), Product(1, Step(2, "b"))
    assert first == second and first is not second and second.inner.note == "b"
    monkeypatch.setattr(timestamp, "INTERNED_PRODUCTS", 4)
    monkeypatch.setattr(timestamp, "_interned", {})
    counts = {Product(0, i): i for i in range(10)}      # the table emptied twice meanwhile
    assert len(timestamp._interned) <= 4
    again = [Product(0, i) for i in range(10)]
    assert [counts[t] for t in again] == list(range(10))
    assert all(hash(t) == hash(u) and t == u for t, u in zip(counts, again))
    assert Product(0, 9) is again[9] and Product(0, 0) is not next(iter(counts))


def test_product_minimum():
    assert Product.minimum() == Product(0, 0)
    for a in range(3):
        for b in range(3):
            assert Product.minimum().less_equal(Product(a, b))


def test_product_pickling_roundtrip():
    for t in [Product(0, 0), Product(3, 7), Product(Product(1, 2), 3)]:
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            u = pickle.loads(pickle.dumps(t, protocol))
            assert u == t
            assert hash(u) == hash(t)
            assert type(u) is Product


def test_nested_product_order():
    a = Product(Product(1, 0), 2)
    b = Product(Product(1, 1), 2)
    c = Product(Product(0, 5), 3)
    assert a.less_equal(b) and a.less_than(b)
    assert not a.less_equal(c) and not c.less_equal(a)
    assert not b.less_equal(c)


def test_product_repr():
    assert repr(Product(4, 1)) == "Product(4, 1)"


def test_top_level_exports():
    for name in ["Antichain", "MutableAntichain", "ChangeBatch", "Product"]:
        assert getattr(st, name) is getattr(st.progress, name)


@pytest.mark.parametrize("compare, told", [
    (lambda: Antichain([1]).insert(Product(0, 0)), r"Product\(0, 0\) with 1"),
    (lambda: Antichain([Product(0, 0)]).insert(1), r"Product\(0, 0\) with 1"),
    (lambda: sorted([Product(1, 0), 2]), r"Product\(1, 0\) with 2"),
    (lambda: MutableAntichain().update_iter([(1, 1), (Product(0, 0), 1)]),
     r"Product\(0, 0\) with 1"),
])
def test_times_of_two_types_are_a_type_error_naming_them(compare, told):
    """They were an AttributeError ('int' object has no attribute 'outer'), which code that
    falls back on TypeError (sorting times that do not compare) did not catch; then, with an
    int first, Python's "'<=' not supported between instances of 'int' and 'Product'"."""
    with pytest.raises(TypeError, match=rf"^cannot compare {told}: they are times of two types$"):
        compare()
