"""The vectorised paths write exactly what the per-record paths write.

Large batches are encoded column by column (``Encoder._prepare_plain`` or message by message),
their queues chosen with numpy and their records written by ``CommitLog.append_headers``; small
batches go record by record (``append_batch``). Consume queues are written a run at a time
(``ConsumeQueue.put_units``) from a ``DispatchBatch``. Each pair must give identical bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import strata
from strata.format.consume_queue import UNIT_DTYPE
from strata.index.consume_queue import ConsumeQueue
from strata.index.dispatch_batch import DispatchBatch, TopicNames, read_batch
from strata.store.prepared import COLUMNAR_BATCH
from store_helpers import clock, config, settle  # noqa: F401 (clock is a fixture)


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.parent.name != "index"}


def message(i: int, kind: str) -> strata.Message:
    body = bytes([i % 251]) * (i * 37 % 3000)  # ~1.5 KiB: 64 KiB segments roll often
    if kind == "plain":
        return strata.Message("plain", body)
    if kind == "born":  # plain but for some born timestamps
        return strata.Message("plain", body, born_timestamp=1000 + i if i % 3 else None)
    if kind == "keys":
        return strata.Message("plain", body, keys=(f"k{i}", "shared"), tags=f"t{i % 3}",
                              properties={"n": str(i), "ü": "ß"} if i % 4 else None)
    if kind == "topics":  # several topics (demo-like), some with shard keys, some plain
        topic = ["a", "bb", "plain"][i % 3]
        if i % 7 == 0:
            return strata.Message(topic, body)
        return strata.Message(topic, body, keys=[f"k{i}", "s"], tags=f"t{i % 3}",
                              properties={"r": "eu", "n": str(i)},
                              shard_key=f"e{i // 3}" if i % 2 else None,
                              born_timestamp=1000 + i)
    if kind == "shard":  # one topic, shard keys on most (the rest round-robin), born times
        return strata.Message("plain", body, keys=[f"k{i}"] * (i % 3), tags=f"t{i}" if i % 2
                              else None, properties={"p": "é" * (i % 4)} if i % 5 else {},
                              shard_key=(f"s{i % 7}" if i % 2 else i % 11) if i % 4 else None,
                              born_timestamp=1000 + i)
    return strata.Message(["a", "b", "plain"][i % 3], body, keys=(f"k{i}",) if i % 2 else (),
                          queue_id=i % 2 if i % 5 == 0 else None,
                          shard_key=f"s{i % 7}" if i % 5 == 1 else None,
                          born_host=("::1", 9) if i % 5 == 2 else ("10.0.0.1", 7) if i % 5 == 3
                          else None, flag=i % 3, reconsume_times=i % 2,
                          born_timestamp=1000 + i)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(kind="plain", sizes=[COLUMNAR_BATCH - 1, COLUMNAR_BATCH, 150])
@example(kind="keys", sizes=[150, 3])
@example(kind="mixed", sizes=[150, 1])
@example(kind="born", sizes=[40, 2])
@example(kind="shard", sizes=[100, 40, 5])
@example(kind="topics", sizes=[120, 33, 2])
@given(kind=st.sampled_from(["plain", "born", "keys", "shard", "topics", "mixed"]),
       sizes=st.lists(st.integers(1, 150), min_size=1, max_size=4))
def test_batched_and_single_puts_write_the_same_bytes(tmp_path_factory, clock, kind, sizes):
    root = tmp_path_factory.mktemp("paths")
    msgs = [message(i, kind) for i in range(sum(sizes))]
    with strata.open(root / "batched", config()) as a, \
            strata.open(root / "single", config()) as b:
        results_a, results_b, i = [], [], 0
        for n in sizes:  # batches above and below COLUMNAR_BATCH, rolling segments
            results_a += a.put_batch(msgs[i:i + n])
            results_b += [b.put(m) for m in msgs[i:i + n]]
            i += n
        settle(a)
        settle(b)
        assert [(r.commitlog_offset, r.size, r.topic, r.queue_id, r.queue_offset, r.msg_id)
                for r in results_a] == \
            [(r.commitlog_offset, r.size, r.topic, r.queue_id, r.queue_offset, r.msg_id)
             for r in results_b]
        a.flush()
        b.flush()
    # commit log and consume queues byte for byte (checkpoints differ only in their times)
    for sub in ("commitlog", "consumequeue"):
        assert files_of(root / "batched" / sub) == files_of(root / "single" / sub)
    with strata.open(root / "batched") as a:
        got = list(a.scan())
        assert [m.body for m in got] == [m.body for m in msgs]
        assert [m.keys for m in got] == [tuple(m.keys) for m in msgs]
        assert [m.flag for m in got] == [m.flag for m in msgs]


def test_round_robin_continues_across_batch_shapes(tmp_path):
    with strata.open(tmp_path / "s", config()) as store:
        store.create_topic("t", queues=3)
        results = store.put_batch([strata.Message("t", b"x")] * 2)
        results += store.put_batch([strata.Message("t", b"x")] * 40)
        results += store.put_batch([strata.Message("t", b"x")])
        assert [r.queue_id for r in results] == [i % 3 for i in range(43)]
        per_queue = {}
        for r in results:
            assert r.queue_offset == per_queue.get(r.queue_id, 0)
            per_queue[r.queue_id] = r.queue_offset + 1


@pytest.mark.parametrize("shape", ["columns", "per-message"])
def test_round_robin_goes_on_where_it_stopped_after_a_reopen(tmp_path, shape):
    """A process that opens the store for a few puts at a time (a Spark sink commit) must not
    pile them onto queue 0: after an open, round-robin starts at the first queue holding the
    fewest messages."""
    def put(store, n):
        msgs = [strata.Message("t", b"x") for _ in range(n)]
        if shape == "per-message":      # a second topic takes the message-by-message path
            msgs.append(strata.Message("other", b"y"))
        return [r.queue_id for r in store.put_batch(msgs)][:n]

    path = tmp_path / "s"
    got = []
    for n in (3, 2, 1, 5, 2):
        with strata.open(path, config()) as store:
            store.create_topic("t", queues=4)
            got += put(store, n)
    assert got == [i % 4 for i in range(13)]          # as one unbroken round-robin
    with strata.open(path, config()) as store:        # queue 0 gets three more by hand
        store.put_batch([strata.Message("t", b"z", queue_id=0)] * 3)
    with strata.open(path, config()) as store:        # 7, 3, 3, 3: go on at queue 1
        assert put(store, 4) == [1, 2, 3, 0]


def test_columns_and_single_units_build_the_same_consume_queue(tmp_path):
    """Replay overlaps, a run crossing files, a gap before a new file: same bytes."""
    def fresh(name):
        cq = ConsumeQueue(tmp_path / name, "t", 0, 8)
        cq.load()
        return cq

    runs = [(0, 5), (3, 12), (12, 13), (20, 30)]  # [first, end) queue offsets per batch
    by_cols, by_units = fresh("cols"), fresh("units")
    for lo, hi in runs:
        q = np.arange(lo, hi, dtype=np.int64)
        phys, size, tag = q * 100, q % 7 + 1, q * 3
        units = np.empty(len(q), UNIT_DTYPE)
        units["offset"], units["size"], units["tag"] = phys, size, tag
        by_cols.put_units(q, units)
        for u in zip(q.tolist(), phys.tolist(), size.tolist(), tag.tolist()):
            by_units.put_batch([u])
    assert by_cols.max_offset() == by_units.max_offset() == 30
    assert by_cols.read_units(24, 8).tobytes() == by_units.read_units(24, 8).tobytes()
    by_cols.close(), by_units.close()
    assert files_of(tmp_path / "cols") == files_of(tmp_path / "units")


def test_dispatch_batch_reads_what_the_records_say(tmp_path):
    with strata.open(tmp_path / "s", config()) as store:
        results = store.put_batch([message(i, "mixed") for i in range(60)])
        names = TopicNames()
        batch, nxt = read_batch(store.log, 0, store.log.max_offset(), 25, names)
        assert len(batch) == 25 and nxt == results[25].commitlog_offset
        reqs = batch.requests()
        for r, res in zip(reqs, results):
            assert (r.topic, r.queue_id, r.queue_offset, r.commitlog_offset, r.size) == \
                (res.topic, res.queue_id, res.queue_offset, res.commitlog_offset, res.size)
        again = DispatchBatch.from_requests(reqs)
        assert again.requests() == reqs
        keep = np.arange(len(batch)) % 2 == 0
        assert batch.select(keep).requests() == reqs[::2]


def test_a_wrong_append_hint_is_checked_and_ignored(tmp_path):
    """The dispatcher trusts the writer's record offsets only as far as the headers agree."""
    with strata.open(tmp_path / "s", config()) as store:
        store._reput.stop()
        store.create_topic("t", queues=2)
        results = store.put_batch([strata.Message("t", bytes([i]) * 50) for i in range(40)])
        start = results[0].commitlog_offset
        hint = store.log.recent_appends.pop(start)
        store.log.recent_appends[start] = hint + 1          # every offset one byte off
        store._reput.catch_up()
        for q in (0, 1):
            got = store.get("t", q, 0, 100).messages
            assert [m.body for m in got] == [bytes([i]) * 50 for i in range(q, 40, 2)]


def test_few_records_are_read_as_the_vectorised_reader_reads_them(tmp_path, monkeypatch):
    """DispatchBatch.from_fields takes a plain-Python path for small batches: same columns;
    and a bad offset ends the batch at that record."""
    from strata.index import dispatch_batch as db
    from strata.log.record_fields import fields_at
    with strata.open(tmp_path / "s", config()) as store:
        results = store.put_batch([message(i, "mixed") for i in range(12)])
        seg = store.log.segments.segments[0]
        offsets = np.array([r.commitlog_offset for r in results], np.int64)
        for offs in (offsets, np.concatenate([offsets[:5], offsets[5:6] + 1, offsets[6:]])):
            run = fields_at(seg, offs, seg.committed, verify_crc=False)
            few = DispatchBatch.from_fields(run, TopicNames())
            with monkeypatch.context() as m:
                m.setattr(db, "SMALL_BATCH", 0)  # force the numpy path for the same records
                many = DispatchBatch.from_fields(run, TopicNames())
            assert few.requests() == many.requests()
        assert len(few) == 5   # the shifted offset ended the batch


def test_topics_of_one_length_are_told_apart(tmp_path):
    """The dispatch reader compares equal-length topic names in numpy: a batch mixing them
    is split exactly as the records say, and a one-topic batch gets one code."""
    with strata.open(tmp_path / "s", config()) as store:
        store._reput.stop()
        mixed = store.put_batch([strata.Message(["ta", "tb", "tc"][i * 7 % 3], bytes([i]))
                                 for i in range(60)])
        single = store.put_batch([strata.Message("td", bytes([i])) for i in range(40)])
        for results in (mixed, single):
            start = results[0].commitlog_offset
            end = results[-1].commitlog_offset + results[-1].size
            batch, _ = read_batch(store.log, start, end, 4096, TopicNames())
            assert [r.topic for r in batch.requests()] == [r.topic for r in results]
        assert len(set(batch.topic_codes.tolist())) == 1


def test_consecutive_appends_are_dispatched_as_one_batch(tmp_path):
    """Hints of appends that follow each other are taken together, up to the batch limit;
    the rest stays for the next batch."""
    with strata.open(tmp_path / "s", config()) as store:
        store._reput.stop()
        store.create_topic("t", queues=3)
        results = []
        for k in range(3):
            results += store.put_batch([strata.Message("t", bytes([k, i])) for i in range(40)])
        end = store.log.max_offset()
        batch, nxt = read_batch(store.log, 0, end, 100, TopicNames())
        assert len(batch) == 100 and nxt == results[100].commitlog_offset
        assert batch.offsets.tolist() == [r.commitlog_offset for r in results[:100]]
        assert int(nxt) in store.log.recent_appends  # the rest of the hint is kept
        batch, nxt = read_batch(store.log, nxt, end, 4096, TopicNames())
        assert len(batch) == 20 and nxt == end
        store._reput.catch_up()
        for q in range(3):
            got = store.get("t", q, 0, 100).messages
            assert [m.body for m in got] == [bytes([k, i]) for k in range(3)
                                             for i in range(40) if (k * 40 + i) % 3 == q]
