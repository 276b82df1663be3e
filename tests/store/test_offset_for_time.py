"""``store.offset_for_time``: binary search by store time. ``lower`` = first message stored at
or after the time (max offset if none), ``upper`` = last message stored at or before it (min
offset if none); runs of equal store times are walked to their first / last message."""

from __future__ import annotations

import pytest

import strata
import strata.store.message_store as ms_mod
from strata.errors import InvalidInputError

from store_helpers import T0, clock, drain, open_store, settle  # noqa: F401 (clock is a fixture)





def put_batches(store, clock, times, per_batch, *, queue_id=0, topic="t"):
    """One batch per time; every message of a batch shares the batch's store time."""
    out = []
    for t in times:
        clock.t = t
        rs = store.put_batch([strata.Message(topic, b"%d" % t, queue_id=queue_id)
                              for _ in range(per_batch)])
        assert {r.store_timestamp for r in rs} == {t}
        out.append([r.queue_offset for r in rs])
    return out


def brute(store, topic, q, ts, boundary):
    """The answer by linear scan over every stored message of the queue."""
    mn, mx = store.min_offset(topic, q), store.max_offset(topic, q)
    times = [(m.queue_offset, m.store_timestamp) for m in drain(store, topic, q)]
    if boundary == "lower":
        return next((o for o, t in times if t >= ts), mx)
    return max((o for o, t in times if t <= ts), default=mn)


@pytest.mark.parametrize("units", [4096, 3])   # one queue file, or many small ones
def test_equal_timestamps_between_before_and_after(tmp_path, clock, units):
    with open_store(tmp_path / "s", consume_queue_units=units) as store:
        store.create_topic("t", queues=2)
        times = [T0 + 100, T0 + 200, T0 + 300, T0 + 301]
        batches = put_batches(store, clock, times[:1], 5)
        put_batches(store, clock, [T0 + 150], 2, queue_id=1)       # another queue, interleaved
        batches += put_batches(store, clock, times[1:2], 5)
        put_batches(store, clock, [T0 + 250], 2, queue_id=1)
        batches += put_batches(store, clock, times[2:], 5)
        assert batches == [list(range(i * 5, i * 5 + 5)) for i in range(4)]
        settle(store)
        oft = store.offset_for_time
        # equal timestamps: lower = the first of the batch, upper = the last
        for i, t in enumerate(times):
            assert oft("t", 0, t, "lower") == i * 5
            assert oft("t", 0, t) == i * 5                      # lower is the default
            assert oft("t", 0, t, "upper") == i * 5 + 4
        # between batches
        assert oft("t", 0, T0 + 150, "lower") == 5
        assert oft("t", 0, T0 + 150, "upper") == 4
        assert oft("t", 0, T0 + 299, "lower") == 10
        assert oft("t", 0, T0 + 299, "upper") == 9
        # before the first message
        for ts in (0, T0, T0 + 99):
            assert oft("t", 0, ts, "lower") == 0
            assert oft("t", 0, ts, "upper") == 0
        # after the last message: lower = max offset, upper = the last message
        for ts in (T0 + 302, T0 + 10**9):
            assert oft("t", 0, ts, "lower") == 20
            assert oft("t", 0, ts, "upper") == 19
        # the other queue is searched on its own
        assert oft("t", 1, T0 + 150, "lower") == 0
        assert oft("t", 1, T0 + 150, "upper") == 1
        assert oft("t", 1, T0 + 200, "lower") == 2
        assert oft("t", 1, T0 + 200, "upper") == 1
        assert oft("t", 1, T0 + 251, "lower") == 4
        for ts in range(T0 + 90, T0 + 310, 7):
            for b in ("lower", "upper"):
                assert oft("t", 0, ts, b) == brute(store, "t", 0, ts, b), (ts, b)
                assert oft("t", 1, ts, b) == brute(store, "t", 1, ts, b), (ts, b)


def test_single_message_and_all_equal(tmp_path, clock):
    with open_store(tmp_path / "s") as store:
        put_batches(store, clock, [T0], 1, topic="one")
        put_batches(store, clock, [T0 + 5], 9, topic="same")
        settle(store)
        oft = store.offset_for_time
        assert [oft("one", 0, T0 + d, "lower") for d in (-1, 0, 1)] == [0, 0, 1]
        assert [oft("one", 0, T0 + d, "upper") for d in (-1, 0, 1)] == [0, 0, 0]
        assert [oft("same", 0, T0 + d, "lower") for d in (4, 5, 6)] == [0, 0, 9]
        assert [oft("same", 0, T0 + d, "upper") for d in (4, 5, 6)] == [0, 8, 8]


def test_unknown_and_empty_queues_and_bad_input(tmp_path, clock):
    with open_store(tmp_path / "s") as store:
        store.create_topic("t", queues=2)
        put_batches(store, clock, [T0], 3)
        settle(store)
        assert store.offset_for_time("nope", 0, T0) == 0
        assert store.offset_for_time("t", 5, T0, "upper") == 0
        assert store.offset_for_time("t", 1, T0) == 0          # empty queue
        assert store.offset_for_time("t", 1, T0, "upper") == 0
        with pytest.raises(InvalidInputError):
            store.offset_for_time("t", 0, T0, "middle")
        with pytest.raises(InvalidInputError):
            store.offset_for_time("t", 0, float(T0))


def test_after_retention_the_search_starts_at_the_new_minimum(tmp_path, clock):
    with open_store(tmp_path / "s") as store:
        times = [T0 + 1000 * i for i in range(40)]
        for t in times:
            clock.t = t
            store.put_batch([strata.Message("t", bytes(1000), queue_id=0) for _ in range(5)])
        settle(store)
        store.retention.disk_usage = lambda: 0.10
        assert store.clean_expired(now_ms=T0 + 10**12) >= 1
        mn, mx = store.min_offset("t", 0), store.max_offset("t", 0)
        assert 0 < mn < mx == 200
        first_time = store.earliest_time("t", 0)
        assert first_time in times
        assert store.offset_for_time("t", 0, T0, "lower") == mn
        assert store.offset_for_time("t", 0, T0, "upper") == mn
        assert store.offset_for_time("t", 0, first_time + 1, "lower") == (mn // 5 + 1) * 5
        assert store.offset_for_time("t", 0, times[-1], "lower") == 195
        assert store.offset_for_time("t", 0, times[-1], "upper") == 199
        for ts in range(T0, times[-1] + 2000, 333):
            for b in ("lower", "upper"):
                assert store.offset_for_time("t", 0, ts, b) == brute(store, "t", 0, ts, b)
