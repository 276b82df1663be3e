"""Filter pushdown: the same rows as without it, read from fewer queues, offsets and units."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                    LessThan, LessThanOrEqual, Not, StringStartsWith)

from strata.format.consume_queue import tag_hash
from strata.spark.geometry import open_readonly
from strata.spark.options import parse_read_options
from strata.spark.planning import QueueRange
from strata.spark.pushdown import push_filters
from strata.spark.schema import arrow_schema, read_schema
from strata.spark.source import StrataBatchReader, read_range

pytestmark = pytest.mark.spark

CONF = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture
def pushdown(spark):
    spark.conf.set(CONF, "true")
    yield spark
    spark.conf.set(CONF, "false")


def reader(store_dir, **opts):
    o = parse_read_options({"path": str(store_dir), "subscribe": "orders,audit",
                            "includeMetadata": "true", **opts})
    return StrataBatchReader(o, read_schema(True, False))


def planned(r) -> dict:
    return {(q.topic, q.queue_id): (q.start, q.end) for p in r.partitions() for q in p.ranges}


def ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


# ---------------------------------------------------------------- planning (no Spark job)

def test_push_filters_keeps_exact_ones_and_returns_the_rest():
    topic = EqualTo(("topic",), "orders")
    qids = In(("queue_id",), (0, 2))
    lo, hi = GreaterThanOrEqual(("queue_offset",), 100), LessThan(("queue_offset",), 300)
    tags = EqualTo(("tags",), "tag1")
    when = GreaterThan(("timestamp",), ts(1_000))
    others = [Not(EqualTo(("queue_id",), 1)), IsNotNull(("key",)),
              StringStartsWith(("topic",), "ord"), In(("queue_offset",), (5, 9))]
    pushed, rest = push_filters([topic, qids, lo, hi, tags, when, *others])
    assert pushed.topics == {"orders"} and pushed.queue_ids == {0, 2}
    assert (pushed.offset_lo, pushed.offset_hi) == (100, 10)  # the IN on offsets cuts too
    assert pushed.tag_hashes == {tag_hash("tag1")} and pushed.time_lo_ms == 1_001
    # the returned filters are the very input objects Spark must still evaluate
    assert [id(f) for f in rest] == [id(f) for f in (tags, when, *others)]


def test_pushed_filters_narrow_queues_and_offset_ranges(store_dir):
    full = planned(reader(store_dir))
    assert len(full) == 5
    r = reader(store_dir)
    # through the attribute PySpark calls (the hook), not the implementation directly
    rest = list(r.pushFilters([EqualTo(("topic",), "orders"), In(("queue_id",), (0, 2)),
                               GreaterThan(("queue_offset",), 99),
                               LessThanOrEqual(("queue_offset",), 299)]))
    assert rest == []
    assert planned(r) == {("orders", 0): (100, 300), ("orders", 2): (100, 300)}
    r = reader(store_dir)
    list(r.pushFilters([EqualTo(("topic",), "nope")]))
    assert r.partitions() == []
    r = reader(store_dir, filterPushdown="false")  # the per-read switch
    flt = [EqualTo(("topic",), "orders")]
    assert list(r.pushFilters(flt)) == flt and len(planned(r)) == 5


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    """Topic ev (2 queues), three puts with store times T[0] < T[1] < T[2]; put k gives each
    queue the offsets 10k .. 10k+9."""
    import time

    import strata
    from strata.store.message_store import now_ms
    path = tmp_path_factory.mktemp("pushdown-timed") / "store"
    times = []
    with strata.open(path, strata.StoreConfig(segment_size=64 * 1024, prefault=False)) as s:
        s.create_topic("ev", queues=2)
        for k in range(3):
            while times and now_ms() <= times[-1]:
                time.sleep(0.002)
            res = s.put_batch([strata.Message("ev", f"p{k}-{q}-{i}".encode(), queue_id=q)
                               for q in (0, 1) for i in range(10)])
            times.append(res[0].store_timestamp)
        s.wait_dispatched()
    return path, times


def timed_reader(path):
    o = parse_read_options({"path": str(path), "subscribe": "ev"})
    return StrataBatchReader(o, read_schema(False, False))


def test_timestamp_filters_narrow_through_the_time_lookup(timed):
    path, T = timed
    cases = [
        ([GreaterThanOrEqual(("timestamp",), ts(T[1])), LessThan(("timestamp",), ts(T[2]))],
         (10, 20)),
        ([GreaterThan(("timestamp",), ts(T[0]))], (10, 30)),
        ([LessThanOrEqual(("timestamp",), ts(T[1]))], (0, 20)),
        ([EqualTo(("timestamp",), ts(T[2]))], (20, 30)),
        ([EqualTo(("timestamp",), ts(T[2]) + dt.timedelta(microseconds=1))], None),
        ([GreaterThan(("timestamp",), ts(T[2]))], None),
    ]
    for filters, want in cases:
        r = timed_reader(path)
        rest = list(r.pushFilters(filters))
        assert [id(f) for f in rest] == [id(f) for f in filters]  # Spark re-checks times
        assert planned(r) == ({} if want is None else {("ev", 0): want, ("ev", 1): want}), \
            filters


def test_tag_hashes_skip_units_before_records_are_read(store_dir):
    schema = arrow_schema(read_schema(True, False))
    everything = sum(b.num_rows for b in read_range(str(store_dir), QueueRange("orders", 0, 0,
                                                                               1000), schema,
                                                    256))
    batches = list(read_range(str(store_dir), QueueRange("orders", 0, 0, 1000), schema, 256,
                              tag_hashes=frozenset({tag_hash("tag1")})))
    table = pa.Table.from_batches(batches)
    assert everything == 1000 and 0 < table.num_rows < everything / 3
    assert set(table.column("tags").to_pylist()) == {"tag1"}
    with open_readonly(store_dir) as s:
        want = [m.queue_offset for m in s.get("orders", 0, 0, 1000).messages if m.tags == "tag1"]
    assert table.column("queue_offset").to_pylist() == want


# ---------------------------------------------------------------- Spark, with the conf on

QUERIES = [
    "topic = 'orders' AND queue_id IN (0, 2) AND queue_offset >= 100 AND queue_offset < 300",
    "tags = 'tag3' AND queue_id = 1",
    "tags IN ('tag1', 'tag3') AND topic = 'audit'",
    "queue_id = 1 OR queue_offset < 3",  # an OR is never pushed
    "NOT topic = 'orders' AND queue_offset IN (1, 5, 600)",
]


def load(spark, store_dir, **opts):
    r = (spark.read.format("strata").option("path", str(store_dir))
         .option("subscribe", "orders,audit").option("includeMetadata", "true"))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def rows(spark, store_dir, **opts):
    """Every query's rows, tagged with the query's number: one Spark job (a union of scans,
    each planned and pushed down on its own)."""
    from functools import reduce

    from pyspark.sql import functions as F
    parts = [load(spark, store_dir, **opts).where(q).withColumn("q", F.lit(i))
             for i, q in enumerate(QUERIES)]
    got = reduce(lambda a, b: a.unionByName(b), parts).collect()
    return sorted((r.q, r.topic, r.queue_id, r.queue_offset, bytes(r.value), r.tags) for r in got)


def test_pushdown_returns_the_same_rows(pushdown, store_dir):
    with_pushdown = rows(pushdown, store_dir)
    assert with_pushdown == rows(pushdown, store_dir, filterPushdown="false")
    assert {r[0] for r in with_pushdown} == set(range(len(QUERIES)))  # no query came back empty


def test_pushdown_on_timestamps_returns_the_same_rows(pushdown, timed):
    path, T = timed
    lo, hi = ts(T[1]).strftime("%Y-%m-%d %H:%M:%S.%f"), ts(T[2]).strftime("%Y-%m-%d %H:%M:%S.%f")
    q = f"timestamp >= TIMESTAMP '{lo}' AND timestamp < TIMESTAMP '{hi}'"
    df = pushdown.read.format("strata").option("path", str(path)).option("subscribe", "ev")
    got = sorted(bytes(r.value) for r in df.load().where(q).collect())
    off = df.option("filterPushdown", "false").load().where(q)
    assert got == sorted(bytes(r.value) for r in off.collect())
    assert got == sorted(f"p1-{q}-{i}".encode() for q in (0, 1) for i in range(10))


def test_pushdown_plans_fewer_partitions(pushdown, store_dir):
    df = load(pushdown, store_dir, minPartitions="1")  # one task per queue range, not packed
    assert df.rdd.getNumPartitions() == 5
    assert df.where("topic = 'orders' AND queue_id = 2").rdd.getNumPartitions() == 1
    assert df.where("queue_id = 0").rdd.getNumPartitions() == 2
    # offset and time bounds beyond the data leave nothing to read (Spark's one empty stand-in)
    assert df.where("queue_offset >= 5000").rdd.getNumPartitions() == 1
    assert df.where("queue_offset >= 5000").count() == 0
    future = "timestamp > TIMESTAMP '2200-01-01 00:00:00'"
    assert df.where(future).rdd.getNumPartitions() == 1 and df.where(future).count() == 0


def test_reads_work_with_spark_pushdown_off(spark, store_dir):
    assert spark.conf.get(CONF) in ("false", None)
    assert load(spark, store_dir).where(QUERIES[0]).count() == 400
