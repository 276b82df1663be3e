"""Streaming reads through spark.readStream.format("strata"): admission control, AvailableNow,
restarts from a checkpoint, queues and topics appearing mid-stream, data loss by retention.

The pure offset arithmetic (limit splitting, data-loss decisions, minOffsetsPerTrigger timing) is
tested first without Spark; the Spark tests use AvailableNow or processAllAvailable so every
assertion is about rows and offsets, never about time.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
from pyspark.sql.types import IntegerType, StructField, StructType

import strata
from strata.errors import InvalidInputError
from strata.spark.options import (DEFAULT_MAX_TRIGGER_DELAY_MS, OptionError,
                                  parse_stream_read_options)
from strata.spark.planning import QueueRange, pack_ranges
from strata.spark.schema import read_schema
from strata.spark.stream_read import (DataLossError, StrataStreamReader, handle_losses,
                                      offsets_from_json, offsets_to_json, reconcile,
                                      should_wait, split_limit)

from spark_support import small_store_config

pytestmark = pytest.mark.spark

HOUR_MS = 3_600_000


# ------------------------------------------------------------------ helpers

def body(topic: str, seq: int) -> bytes:
    return f"{topic}-{seq:06d}-".encode() + bytes(40 + seq % 50)


def append(path: Path, topic: str, n: int, *, queues: int = 3) -> None:
    """``n`` messages to ``topic`` (created with ``queues`` queues), round robin over queues."""
    with strata.open(path, small_store_config()) as store:
        store.create_topic(topic, queues=queues)
        first = sum(store.max_offset(topic, q) for q in range(store.queue_count(topic)))
        store.put_batch([strata.Message(topic, body(topic, first + i)) for i in range(n)])
        assert store.wait_dispatched()


def bounds(path: Path, topic: str) -> dict[int, tuple[int, int]]:
    from strata.spark.geometry import open_readonly
    with open_readonly(path) as store:
        return {q: (store.min_offset(topic, q), store.max_offset(topic, q))
                for q in range(store.queue_count(topic))}


def stream(spark, path: Path, **opts):
    r = spark.readStream.format("strata").option("path", str(path))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(spark, path: Path, checkpoint: Path, **opts):
    """Run one AvailableNow query into foreachBatch; returns ([rows of each non-empty batch],
    the query) with rows as (topic, queue_id, queue_offset, value bytes)."""
    batches: list[list[tuple]] = []

    def collect(df, _batch_id):
        rows = [(r.topic, r.queue_id, r.queue_offset, bytes(r.value)) for r in
                df.select("topic", "queue_id", "queue_offset", "value").collect()]
        if rows:
            batches.append(rows)

    q = (stream(spark, path, **opts).writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(120), "AvailableNow query did not finish"
    finally:
        q.stop()
    return batches, q


def stored_rows(path: Path, topics) -> list[tuple]:
    """Every message of ``topics`` through the store's own get(), sorted like Spark rows."""
    from strata.spark.geometry import open_readonly
    out = []
    with open_readonly(path) as store:
        for t in topics:
            for qid in range(store.queue_count(t)):
                off, end = store.min_offset(t, qid), store.max_offset(t, qid)
                while off < end:
                    got = store.get(t, qid, off, max_messages=512)
                    out += [(t, qid, m.queue_offset, m.body) for m in got.messages]
                    off = got.next_offset
    return sorted(out)


def memory_stream(spark, path: Path, name: str, **opts):
    """A running query of ``stream(...)`` into the memory table ``name``, a trigger every
    200 ms."""
    return (stream(spark, path, **opts).writeStream.format("memory").queryName(name)
            .trigger(processingTime="200 milliseconds").start())


def memory_rows(spark, name: str) -> list[tuple]:
    """(topic, queue_id, queue_offset, value) of every row in the memory table ``name``."""
    return [(r.topic, r.queue_id, r.queue_offset, bytes(r.value))
            for r in spark.sql(f"select * from {name}").collect()]


def per_queue(rows) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for topic, q, off, _v in rows:
        out.setdefault((topic, q), []).append(off)
    return {k: sorted(v) for k, v in out.items()}


def flat(batches) -> list[tuple]:
    return [r for b in batches for r in b]


# ------------------------------------------------------------------ pure offset arithmetic

def test_split_limit_is_proportional_to_backlog_and_exact():
    start = {("a", 0): 0, ("a", 1): 100, ("b", 0): 5}
    avail = {("a", 0): 600, ("a", 1): 400, ("b", 0): 105}   # backlogs 600, 300, 100
    end = split_limit(start, avail, 100)
    assert end == {("a", 0): 60, ("a", 1): 130, ("b", 0): 15}
    # largest remainder: 7 * (600, 300, 100) / 1000 = 4.2, 2.1, 0.7 -> 4, 2, 1
    assert split_limit(start, avail, 7) == {("a", 0): 4, ("a", 1): 102, ("b", 0): 6}


def test_split_limit_edges():
    start = {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}
    avail = {("t", 0): 10, ("t", 1): 13, ("t", 2): 13}
    # nothing to read in queue 0; the limit covers everything else
    assert split_limit(start, avail, 100) == avail
    # ties go to the queue that sorts first; the total is exactly the limit
    assert split_limit(start, avail, 3) == {("t", 0): 10, ("t", 1): 12, ("t", 2): 11}
    assert split_limit(start, avail, 0) == start
    # a queue missing from start (not tracked yet) contributes no backlog
    assert split_limit({}, {("t", 0): 7}, 5) == {("t", 0): 7}
    for limit in range(0, 12):
        end = split_limit(start, avail, limit)
        assert sum(end[k] - start[k] for k in end) == min(limit, 6)
        assert all(start[k] <= end[k] <= avail[k] for k in end)


def test_offsets_json_is_sorted_and_round_trips():
    offs = {("b", 10): 5, ("b", 2): 7, ("a", 0): 1}
    js = offsets_to_json(offs)
    assert json.dumps(js) == '{"a": {"0": 1}, "b": {"2": 7, "10": 5}}'
    assert offsets_from_json(json.loads(json.dumps(js))) == offs
    with pytest.raises(InvalidInputError, match="not a strata stream offset"):
        offsets_from_json({"a": {"0": "x"}})


def test_reconcile_decides_data_loss():
    start = {("t", 0): 10, ("t", 1): 10, ("t", 2): 50, ("gone", 0): 3}
    b = {("t", 0): (0, 20),      # fine
         ("t", 1): (15, 30),     # retention removed 10..14
         ("t", 2): (0, 4),       # reset: the queue is behind the stream
         ("t", 3): (0, 9),       # new queue, complete
         ("t", 4): (2, 9),       # new queue, 0..1 already deleted
         ("gone", 0): None}
    eff, losses = reconcile(start, b)
    assert eff == {("t", 0): 10, ("t", 1): 15, ("t", 2): 0, ("t", 3): 0, ("t", 4): 2}
    text = [x.describe() for x in losses]
    assert text[0].startswith("gone/0: offsets from 3 on are lost")
    assert "t/1: offsets 10..14 are lost (deleted by retention" in text[1]
    assert text[2].startswith("t/2: offsets from 50 on are lost")
    assert text[3].startswith("t/4: offsets 0..1 are lost")
    with pytest.raises(DataLossError, match=r"t/1: offsets 10\.\.14 .*failOnDataLoss=false"):
        handle_losses(losses, fail_on_data_loss=True)
    handle_losses(losses, fail_on_data_loss=False)   # logs, does not raise
    handle_losses([], fail_on_data_loss=True)


def test_should_wait_for_min_rows_until_the_delay():
    assert should_wait(new_rows=5, min_rows=10, since_last_batch_ms=100, max_delay_ms=1000)
    assert not should_wait(new_rows=10, min_rows=10, since_last_batch_ms=100, max_delay_ms=1000)
    assert not should_wait(new_rows=5, min_rows=10, since_last_batch_ms=1000, max_delay_ms=1000)


def test_stream_option_parsing():
    o = parse_stream_read_options({"path": "/x", "subscribe": "a"})
    assert o.read.starting == "latest"          # streams start at latest by default
    assert o.max_offsets_per_trigger is None and o.min_offsets_per_trigger is None
    assert o.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 15 * 60 * 1000
    o = parse_stream_read_options({"path": "/x", "subscribe": "a", "startingOffsets": "earliest",
                                   "MaxOffsetsPerTrigger": "100", "minOffsetsPerTrigger": "10",
                                   "maxTriggerDelay": "30s"})
    assert o.read.starting == "earliest"
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == \
        (100, 10, 30_000)
    for text, ms in (("250", 250), ("250ms", 250), ("2 m", 120_000), ("1h", HOUR_MS),
                     ("1d", 24 * HOUR_MS), ("3min", 180_000)):
        assert parse_stream_read_options({"path": "/x", "subscribe": "a",
                                          "maxTriggerDelay": text}).max_trigger_delay_ms == ms


@pytest.mark.parametrize("opts, option", [
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"maxOffsetsPerTrigger": "lots"}, "maxOffsetsPerTrigger"),
    ({"minOffsetsPerTrigger": "-3"}, "minOffsetsPerTrigger"),
    ({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"}, "minOffsetsPerTrigger"),
    ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
    ({"maxTriggerDelay": "-5s"}, "maxTriggerDelay"),
    ({"endingOffsets": "latest"}, "endingOffsets"),
    ({"startingOffsets": "now"}, "startingOffsets"),
    ({"failOnDataLoss": "perhaps"}, "failOnDataLoss"),
])
def test_bad_stream_options_are_refused_by_the_parser(opts, option):
    with pytest.raises(OptionError, match=f"option '{option}'"):
        parse_stream_read_options({"path": "/x", "subscribe": "a", **opts})


# ------------------------------------------------------------------ driver logic, no Spark job

class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def driver_reader(path: Path, clock: FakeClock, **opts) -> StrataStreamReader:
    """The stream reader as Spark's driver-side process uses it, on a fake clock."""
    return StrataStreamReader(parse_stream_read_options({"path": str(path), **opts}),
                              read_schema(), clock_ms=clock)


def test_driver_min_offsets_wait_for_rows_or_delay(tmp_path):
    path = tmp_path / "store"
    append(path, "t", 30)
    clock = FakeClock()
    r = driver_reader(path, clock, subscribe="t", minOffsetsPerTrigger="20",
                      maxTriggerDelay="10s", maxOffsetsPerTrigger="25")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    start = r.initialOffset()
    assert start == {"t": {"0": 10, "1": 10, "2": 10}}          # latest by default
    append(path, "t", 12)
    assert r.latestOffset(start, ReadMaxRows(25)) == start       # 12 < 20: wait
    clock.ms += 9_999
    assert r.latestOffset(start, ReadMaxRows(25)) == start
    clock.ms += 1                                                # the delay has passed
    end = r.latestOffset(start, ReadMaxRows(25))
    assert end == {"t": {"0": 14, "1": 14, "2": 14}}
    assert r.reportLatestOffset() == end
    append(path, "t", 45)                                        # 45 new >= 20: at once,
    end2 = r.latestOffset(end, ReadMaxRows(25))                  # capped at 25
    assert sum(end2["t"][q] - end["t"][q] for q in end["t"]) == 25
    # Spark's ReadAllAvailable (e.g. Trigger.Once) ignores both limits
    assert r.latestOffset(end, ReadAllAvailable()) == {"t": {"0": 29, "1": 29, "2": 29}}
    only_min = driver_reader(path, clock, subscribe="t", minOffsetsPerTrigger="5")
    assert only_min.getDefaultReadLimit() == ReadMinRows(5)
    assert driver_reader(path, clock, subscribe="t").getDefaultReadLimit() == ReadAllAvailable()


def test_driver_available_now_stops_at_the_snapshot_and_ignores_min(tmp_path):
    path = tmp_path / "store"
    append(path, "t", 30)
    clock = FakeClock()
    r = driver_reader(path, clock, subscribe="t,later", startingOffsets="earliest",
                      minOffsetsPerTrigger="15", maxOffsetsPerTrigger="20")
    start = r.initialOffset()
    assert start == {"t": {"0": 0, "1": 0, "2": 0}}              # "later" does not exist yet
    r.prepareForTriggerAvailableNow()
    append(path, "t", 30)                                        # after the snapshot: not read
    append(path, "later", 5)
    ends, cur = [], start
    while True:
        nxt = r.latestOffset(cur, ReadMaxRows(20))
        if nxt == cur:
            break
        ends.append(nxt)
        cur = nxt
    assert [sum(e["t"].values()) for e in ends] == [20, 30]   # the last 10 < 15: not held back
    assert cur == {"t": {"0": 10, "1": 10, "2": 10}}


def test_pack_ranges_shares_tasks_between_small_ranges():
    rs = [QueueRange("t", q, 0, n) for q, n in enumerate((70, 0, 30, 50, 200, 20, 25))]
    groups = pack_ranges(rs, 100)
    assert [[(r.queue_id, r.size) for r in g] for g in groups] == \
        [[(4, 200)], [(0, 70), (2, 30)], [(3, 50), (6, 25), (5, 20)]]
    assert pack_ranges([], 100) == []


def test_driver_partitions_cover_the_range_once(tmp_path):
    path = tmp_path / "store"
    append(path, "t", 90)
    start, end = {"t": {"0": 5, "1": 0}}, {"t": {"0": 30, "1": 30, "2": 30}}
    packed = driver_reader(path, FakeClock(), subscribe="t").partitions(start, end)
    assert [sorted(p.value) for p in packed] == [[("t", 0, 5, 30), ("t", 1, 0, 30),
                                                  ("t", 2, 0, 30)]]   # one task shares them
    r = driver_reader(path, FakeClock(), subscribe="t", minPartitions="5")
    parts = r.partitions(start, end)
    assert all(len(p.ranges) == 1 for p in parts)
    got = sorted((p.ranges[0].queue_id, p.ranges[0].start, p.ranges[0].end) for p in parts)
    assert len(got) >= 5
    for q, lo in ((0, 5), (1, 0), (2, 0)):     # queue 2 is new: from its earliest offset
        mine = [(s, e) for qq, s, e in got if qq == q]
        assert mine[0][0] == lo and mine[-1][1] == 30
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
    assert r.partitions({"t": {"0": 5}}, {"t": {"0": 5}}) == []


# ------------------------------------------------------------------ Spark streaming queries

def test_available_now_with_max_offsets_makes_several_batches(spark, store_dir, tmp_path):
    batches, q = run_available_now(spark, store_dir, tmp_path / "ck", subscribe="orders,audit",
                                   startingOffsets="earliest", maxOffsetsPerTrigger="1500")
    assert [len(b) for b in batches] == [1500, 1500, 700]
    rows = flat(batches)
    assert len(set((t, qid, off) for t, qid, off, _ in rows)) == len(rows) == 3700
    # the first batch took from each queue its share of the limit, proportional to its backlog
    want_bounds = {(t, qid): b for t in ("orders", "audit")
                   for qid, b in bounds(store_dir, t).items()}
    first_end = split_limit({k: lo for k, (lo, _) in want_bounds.items()},
                            {k: hi for k, (_, hi) in want_bounds.items()}, 1500)
    got_first = per_queue(batches[0])
    assert {k: v[-1] + 1 for k, v in got_first.items()} == first_end
    # every row is the stored message at its queue offset
    assert sorted(rows) == stored_rows(store_dir, ("orders", "audit"))
    # the final offset is the sorted JSON of every queue's end
    end = json.loads(q.lastProgress["sources"][0]["endOffset"])
    assert end == offsets_to_json({k: hi for k, (_, hi) in want_bounds.items()})
    assert list(end) == ["audit", "orders"]


def test_restart_from_checkpoint_continues_without_gap_or_duplicate(spark, tmp_path):
    path, ck = tmp_path / "store", tmp_path / "ck"
    append(path, "t", 60)                                   # 20 per queue, before the query
    first, _ = run_available_now(spark, path, ck, subscribe="t")
    assert first == []                                      # startingOffsets defaults to latest
    append(path, "t", 90)
    second, _ = run_available_now(spark, path, ck, subscribe="t", maxOffsetsPerTrigger="40")
    assert [len(b) for b in second] == [40, 40, 10]
    assert per_queue(flat(second)) == {("t", q): list(range(20, 50)) for q in range(3)}
    append(path, "t", 30)
    third, _ = run_available_now(spark, path, ck, subscribe="t", maxOffsetsPerTrigger="40")
    rows = flat(third)
    assert per_queue(rows) == {("t", q): list(range(50, 60)) for q in range(3)}
    seqs = sorted(int(v.split(b"-")[1]) for *_, v in flat(second) + rows)
    assert seqs == list(range(60, 180))                     # the bodies appended, each once
    assert all(v == body("t", int(v.split(b"-")[1])) for *_, v in rows)


def test_new_topic_matching_the_pattern_is_picked_up_mid_stream(spark, tmp_path):
    path = tmp_path / "store"
    append(path, "ev1", 20, queues=2)
    q = memory_stream(spark, path, "strata_stream_new_topic", subscribePattern="ev.*",
                      startingOffsets="earliest")
    try:
        q.processAllAvailable()
        assert len(memory_rows(spark, "strata_stream_new_topic")) == 20
        append(path, "ev2", 30, queues=3)          # a new topic with three queues
        append(path, "ev1", 10, queues=2)
        append(path, "other", 10)                  # does not match the pattern
        q.processAllAvailable()
        rows = memory_rows(spark, "strata_stream_new_topic")
    finally:
        q.stop()
    want = {("ev1", 0): list(range(15)), ("ev1", 1): list(range(15)),
            **{("ev2", qid): list(range(10)) for qid in range(3)}}
    assert per_queue(rows) == want
    assert len(rows) == 60


def test_queue_added_to_a_topic_is_picked_up_mid_stream(spark, tmp_path):
    path = tmp_path / "store"
    append(path, "grow", 20, queues=2)
    q = memory_stream(spark, path, "strata_stream_new_queue", subscribe="grow",
                      startingOffsets="latest")
    try:
        q.processAllAvailable()                    # starts at latest: nothing yet
        with strata.open(path, small_store_config()) as store:
            assert store.set_queue_count("grow", 3) == 3
        append(path, "grow", 9, queues=3)          # 3 to each queue, the new one included
        q.processAllAvailable()
        rows = memory_rows(spark, "strata_stream_new_queue")
    finally:
        q.stop()
    # the old queues continue where "latest" was; the new queue is read from its start
    assert per_queue(rows) == {("grow", 0): [10, 11, 12], ("grow", 1): [10, 11, 12],
                               ("grow", 2): [0, 1, 2]}


def _expire_all_but_newest_segment(path: Path) -> None:
    with strata.open(path, small_store_config()) as store:
        assert store.clean_expired(now_ms=int(time.time() * 1000) + 100 * HOUR_MS) > 0


def test_retention_of_unread_data_fails_or_continues(spark, tmp_path):
    path, ck = tmp_path / "store", tmp_path / "ck"
    append(path, "t", 30)
    first, _ = run_available_now(spark, path, ck, subscribe="t", startingOffsets="earliest")
    assert len(flat(first)) == 30
    append(path, "t", 3000)                        # ~10 segments of 64 KiB, none read yet
    _expire_all_but_newest_segment(path)
    b = bounds(path, "t")
    assert all(lo > 10 for lo, _ in b.values())    # unread offsets are gone
    shutil.copytree(ck, tmp_path / "ck2")

    with pytest.raises(Exception) as err:
        run_available_now(spark, path, ck, subscribe="t")
    text = str(err.value)
    for qid, (lo, _) in b.items():
        assert f"t/{qid}: offsets 10..{lo - 1} are lost" in text
    assert "failOnDataLoss" in text

    rest, _ = run_available_now(spark, path, tmp_path / "ck2", subscribe="t",
                                failOnDataLoss="false")
    assert per_queue(flat(rest)) == {("t", qid): list(range(lo, hi))
                                     for qid, (lo, hi) in b.items()}


def test_bad_stream_option_fails_the_query_naming_the_option(spark, store_dir, tmp_path):
    # (every option's checks are in test_bad_stream_options_are_refused_by_the_parser)
    with pytest.raises(Exception, match="option 'maxOffsetsPerTrigger'"):
        run_available_now(spark, store_dir, tmp_path / "ck", subscribe="orders",
                          maxOffsetsPerTrigger="many")


def test_stream_reader_refuses_unknown_columns(tmp_path):
    append(tmp_path / "store", "t", 3)
    options = parse_stream_read_options({"path": str(tmp_path / "store"), "subscribe": "t"})
    with pytest.raises(OptionError, match="no column 'nope'"):
        StrataStreamReader(options, StructType([StructField("nope", IntegerType())]))


def test_task_read_after_retention_uses_the_logs_minimum(tmp_path):
    """A consume-queue file can outlive the log segments its first units point to; a task must
    judge lost offsets by the store's minimum, not by that file."""
    from strata.spark.schema import arrow_schema
    from strata.spark.source import read_range
    path = tmp_path / "store"
    append(path, "t", 2000, queues=1)
    _expire_all_but_newest_segment(path)
    (lo, hi), = bounds(path, "t").values()
    assert 0 < lo < hi
    schema = arrow_schema(read_schema())
    with pytest.raises(strata.errors.CorruptStoreError, match=rf"t/0: offsets 5\.\.{lo - 1} "):
        list(read_range(str(path), QueueRange("t", 0, 5, hi), schema, 1000, True))
    got = list(read_range(str(path), QueueRange("t", 0, 5, hi), schema, 1000, False))
    offsets = [o for b in got for o in b.column("queue_offset").to_pylist()]
    assert offsets == list(range(lo, hi))


def test_driver_starting_timestamp_applies_to_new_streams(tmp_path):
    path = tmp_path / "store"
    append(path, "t", 30)
    r = driver_reader(path, FakeClock(), subscribe="t", startingTimestamp="0")
    assert r.initialOffset() == {"t": {"0": 0, "1": 0, "2": 0}}   # not the default latest
