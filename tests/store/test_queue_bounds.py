"""``queue_counts`` and ``queue_bounds``: every topic's queue count and every queue's min/max
offset in one call, the same numbers as ``queue_count``, ``min_offset`` and ``max_offset``,
on a writer and on a reader beside it."""

from __future__ import annotations

import strata

from support import small_store_config


def _each(store) -> list[tuple[str, int, int, int]]:
    return [(t, q, store.min_offset(t, q), store.max_offset(t, q))
            for t in store.topics() for q in range(store.queue_count(t))]


def test_bounds_and_counts_match_the_per_queue_calls(tmp_path):
    with strata.open(tmp_path / "s", small_store_config()) as w:
        w.create_topic("b", queues=3)
        w.create_topic("a", queues=2)
        w.put_batch([strata.Message("b", b"x", queue_id=i % 3) for i in range(10)])
        w.put_batch([strata.Message("a", b"y", queue_id=1) for _ in range(4)])
        w.wait_dispatched()
        assert w.queue_counts() == {"a": 2, "b": 3}
        got = w.queue_bounds()
        assert got == _each(w)
        assert [(t, q) for t, q, _lo, _hi in got] == [("a", 0), ("a", 1), ("b", 0), ("b", 1),
                                                      ("b", 2)]
        assert got[1] == ("a", 1, 0, 4) and got[2] == ("b", 0, 0, 4)
        # the pairs asked for, in their order; a queue that does not exist reads (0, 0)
        assert w.queue_bounds([("b", 2), ("a", 1), ("a", 7), ("nope", 0)]) == [
            ("b", 2, 0, 3), ("a", 1, 0, 4), ("a", 7, 0, 0), ("nope", 0, 0, 0)]
        counts = w.queue_counts()
        counts["a"] = 99                  # the caller's own dict: the store is unchanged
        assert w.queue_count("a") == 2
        with strata.open(tmp_path / "s", readonly=True) as r:   # a reader beside the writer
            assert r.queue_counts() == {"a": 2, "b": 3}
            assert r.queue_bounds() == got
            w.create_topic("c", queues=1)
            w.put(strata.Message("c", b"z"))
            w.wait_dispatched()
            assert r.queue_counts()["c"] == 1          # it follows the writer
            assert r.queue_bounds([("c", 0)]) == [("c", 0, 0, 1)]
