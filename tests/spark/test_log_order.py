"""Reading a task's queue ranges together in commit-log order (log_order.py) and cutting a read
into log regions (planning.log_regions); no Spark job."""

from __future__ import annotations

import numpy as np
import pytest

import strata
from strata.format.consume_queue import tag_hash
from strata.spark import planning
from strata.spark.geometry import open_readonly
from strata.spark.log_order import log_ordered_units
from strata.spark.planning import QueueRange, log_regions, pack_ranges, plan_tasks


@pytest.fixture(scope="module")
def uneven_store(tmp_path_factory):
    """Two topics written interleaved at different rates: "busy" (4 queues, 40 messages a
    round) and "quiet" (1 queue, 3 a round), over many 64 KiB segments; tags a/b alternate."""
    path = tmp_path_factory.mktemp("log-order") / "store"
    cfg = strata.StoreConfig(segment_size=64 * 1024, prefault=False, consume_queue_units=512,
                             index_slots=1024, index_entries=8192)
    with strata.open(path, cfg) as store:
        store.create_topic("busy", queues=4)
        store.create_topic("quiet", queues=1)
        for rnd in range(60):
            store.put_batch([strata.Message("busy", b"b%d" % i * 9, tags="ab"[i % 2])
                             for i in range(40)])
            store.put_batch([strata.Message("quiet", b"q%d" % rnd * 30, tags="a")
                             for _ in range(3)])
        store.wait_dispatched()
    return path


def _ranges(store, start=0):
    return [QueueRange(t, q, start, store.max_offset(t, q))
            for t in ("busy", "quiet") for q in range(store.queue_count(t))]


def _phys(store, r):
    cq = store.queues.get(r.topic, r.queue_id)
    return [cq.unit(o)[0] for o in range(r.start, r.end)]


def test_every_unit_comes_once_in_log_order_batches(uneven_store):
    with open_readonly(uneven_store) as store:
        ranges = _ranges(store, start=5)
        got = {i: [] for i in range(len(ranges))}
        batches = list(log_ordered_units(store, ranges, 64))
        for phys, which in batches:
            assert 0 < len(phys) <= 64
            assert (np.diff(phys) > 0).all()          # each batch in commit-log order
            for p, i in zip(phys.tolist(), which.tolist()):
                got[i].append(p)
        for i, r in enumerate(ranges):               # once each, queue order kept
            assert got[i] == _phys(store, r)
        total = sum(r.size for r in ranges)
        assert [len(p) for p, _ in batches[:-1]] == [64] * (len(batches) - 1)  # full batches
        assert len(batches) == -(-total // 64)


def test_a_quiet_queue_is_read_alongside_the_busy_ones(uneven_store):
    """The quiet queue's units come spread over the batches, next to the busy queues' units
    of the same stretch of log, not all at the end or all at the start."""
    with open_readonly(uneven_store) as store:
        ranges = _ranges(store)
        quiet = len(ranges) - 1
        batches = list(log_ordered_units(store, ranges, 100))
        with_quiet = [b for b, (_, which) in enumerate(batches) if (which == quiet).any()]
        assert len(with_quiet) >= len(batches) // 2
        for phys, which in batches:
            if (which == quiet).any() and (which != quiet).any():
                q, b = phys[which == quiet], phys[which != quiet]
                assert q.min() < b.max() and b.min() < q.max()   # interleaved in the log


def test_tag_hashes_keep_only_matching_units(uneven_store):
    with open_readonly(uneven_store) as store:
        ranges = _ranges(store)
        want = {tag_hash("b")}
        n = sum(len(p) for p, _ in log_ordered_units(store, ranges, 50, tag_hashes=want))
        assert n == 60 * 20                           # half of the busy messages, no quiet one


def test_log_regions_partition_every_range_by_log_position(uneven_store):
    with open_readonly(uneven_store) as store:
        ranges = _ranges(store, start=2)
        tasks = log_regions(store, ranges, 3)
        assert len(tasks) == 3
        total = sum(r.size for r in ranges)
        for t in tasks:                               # about equal work
            assert abs(sum(r.size for r in t) - total / 3) <= len(ranges)
        for r in ranges:                              # every offset in exactly one task
            pieces = sorted((p.start, p.end) for t in tasks for p in t
                            if (p.topic, p.queue_id) == (r.topic, r.queue_id))
            assert pieces[0][0] == r.start and pieces[-1][1] == r.end
            assert all(a[1] == b[0] and a[1] > a[0] for a, b in zip(pieces, pieces[1:]))
        spans = [[p for r in t for p in _phys(store, r)] for t in tasks]
        for a, b in zip(spans, spans[1:]):            # each task one stretch of the log
            assert max(a) < min(b)


def test_log_regions_with_coarse_samples_still_cover_every_offset(uneven_store, monkeypatch):
    monkeypatch.setattr(planning, "REGION_SAMPLES", 8)  # 4 samples per range
    with open_readonly(uneven_store) as store:
        ranges = _ranges(store)
        tasks = log_regions(store, ranges, 4)
        assert 2 <= len(tasks) <= 4
        seen = sorted((p.topic, p.queue_id, o) for t in tasks for p in t
                      for o in range(p.start, p.end))
        assert seen == sorted((r.topic, r.queue_id, o) for r in ranges
                              for o in range(r.start, r.end))


def test_plan_tasks_keeps_the_packed_task_count_unless_min_partitions(uneven_store):
    with open_readonly(uneven_store) as store:
        ranges = _ranges(store) + [QueueRange("busy", 0, 7, 7)]   # an empty range is dropped
        assert len(plan_tasks(store, ranges, None, 10**6)) == 1
        assert len(plan_tasks(store, ranges, None, 700)) == len(pack_ranges(ranges, 700)) == 5
        one_each = plan_tasks(store, ranges, 9, 700)  # Kafka-like: one range per task
        assert len(one_each) >= 9 and all(len(t) == 1 for t in one_each)
