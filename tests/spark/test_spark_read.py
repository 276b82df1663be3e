"""Batch reads through spark.read.format("strata"), checked against the store's own get()."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from strata.spark.options import OptionError, parse_read_options
from strata.spark.planning import QueueRange, pack_ranges, plan_tasks, split_ranges

pytestmark = pytest.mark.spark


def expected(store_dir, topic, queue_id, start=0, end=None):
    """What the store's get() returns for the queue, as (key, value, offset, ts, tags, keys)."""
    with _ro(store_dir) as store:
        end = store.max_offset(topic, queue_id) if end is None else end
        out, off = [], start
        while off < end:
            got = store.get(topic, queue_id, off, max_messages=256)
            for m in got.messages:
                if m.queue_offset < end:
                    out.append(m)
            off = got.next_offset
        return out


def _ro(path):
    from strata.spark.geometry import open_readonly
    return open_readonly(path)


def read(spark, store_dir, **opts):
    r = spark.read.format("strata").option("path", str(store_dir))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def by_queue(rows):
    out = {}
    for r in rows:
        out.setdefault((r.topic, r.queue_id), []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r.queue_offset)
    return out


def test_full_read_equals_store_get_per_queue(spark, store_dir):
    df = read(spark, store_dir, subscribe="orders,audit,empty", includeMetadata="true",
              includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "queue_id", "queue_offset", "timestamp", "timestampType",
        "tags", "keys", "msg_id", "commitlog_offset", "born_timestamp", "headers"]
    # only a message without keys or without tags has a null; lists are empty, never null
    assert [f.name for f in df.schema.fields if f.nullable] == ["key", "tags"]
    assert not df.schema["keys"].dataType.containsNull
    entries = df.schema["headers"].dataType
    assert not entries.containsNull
    assert not any(f.nullable for f in entries.elementType.fields)
    rows = by_queue(df.collect())
    assert sum(len(v) for v in rows.values()) == 3700
    every = [r for v in rows.values() for r in v]
    assert any(r.key is None for r in every) and any(r.tags is None for r in every)
    assert any(r.keys == [] for r in every) and any(r.headers == [] for r in every)
    for topic, n in (("orders", 3), ("audit", 2), ("empty", 2)):
        for q in range(n):
            want = expected(store_dir, topic, q)
            got = rows.get((topic, q), [])
            assert len(got) == len(want)
            for r, m in zip(got, want):
                assert r.queue_offset == m.queue_offset
                assert bytes(r.value) == m.body
                assert (bytes(r.key) if r.key is not None else None) == \
                    (m.keys[0].encode() if m.keys else None)
                assert int(r.timestamp.timestamp() * 1000) == m.store_timestamp
                assert r.timestampType == 1
                assert r.tags == m.tags
                assert list(r.keys) == list(m.keys)
                assert r.msg_id == m.msg_id
                assert r.commitlog_offset == m.commitlog_offset
                assert int(r.born_timestamp.timestamp() * 1000) == m.born_timestamp
                # fill_store gives no born timestamps: each message is born at its put (its
                # store time), never shown as 1970
                assert r.born_timestamp == r.timestamp and r.born_timestamp.year >= 2026
                assert {h.key: bytes(h.value).decode() for h in r.headers} == m.properties


def test_default_schema_and_counts_per_queue(spark, store_dir):
    df = read(spark, store_dir, subscribePattern="ord.*")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,queue_id:int,queue_offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    counts = {(r.topic, r.queue_id): r["count"]
              for r in df.groupBy("topic", "queue_id").count().collect()}
    with _ro(store_dir) as store:
        assert counts == {("orders", q): store.max_offset("orders", q) for q in range(3)}


def test_starting_and_ending_offsets(spark, store_dir):
    start = json.dumps({"orders": {"0": 100, "1": -2, "2": -1}})
    end = json.dumps({"orders": {"0": 350, "1": 10}})
    df = read(spark, store_dir, subscribe="orders", startingOffsets=start, endingOffsets=end)
    rows = by_queue(df.collect())
    with _ro(store_dir) as store:
        assert [r.queue_offset for r in rows[("orders", 0)]] == list(range(100, 350))
        assert [r.queue_offset for r in rows[("orders", 1)]] == list(range(0, 10))
        assert ("orders", 2) not in rows  # latest .. latest is empty
        want = expected(store_dir, "orders", 0, 100, 350)
        assert [bytes(r.value) for r in rows[("orders", 0)]] == [m.body for m in want]
        assert store.max_offset("orders", 2) > 0


def test_latest_start_reads_nothing(spark, store_dir):
    assert read(spark, store_dir, subscribe="orders", startingOffsets="latest").count() == 0


def test_assign_reads_only_the_given_queues(spark, store_dir):
    df = read(spark, store_dir, assign=json.dumps({"orders": [1], "audit": [0, 1]}))
    counts = {(r.topic, r.queue_id): r["count"]
              for r in df.groupBy("topic", "queue_id").count().collect()}
    with _ro(store_dir) as store:
        assert counts == {("orders", 1): store.max_offset("orders", 1),
                          ("audit", 0): store.max_offset("audit", 0),
                          ("audit", 1): store.max_offset("audit", 1)}


def test_min_partitions_and_small_batches_keep_every_row_once(spark, store_dir):
    df = read(spark, store_dir, subscribe="orders", minPartitions="7", maxRecordsPerBatch="97")
    assert df.rdd.getNumPartitions() >= 7
    rows = by_queue(df.collect())
    for q in range(3):
        want = expected(store_dir, "orders", q)
        assert [(r.queue_offset, bytes(r.value)) for r in rows[("orders", q)]] == \
            [(m.queue_offset, m.body) for m in want]


def test_small_queues_share_a_task_and_keep_every_row_once(spark, store_dir):
    df = read(spark, store_dir, subscribe="orders,audit", maxRecordsPerBatch="211")
    assert df.rdd.getNumPartitions() == 1   # 5 small queue ranges packed into one task
    rows = by_queue(df.collect())
    for t, q in [("orders", 0), ("orders", 1), ("orders", 2), ("audit", 0), ("audit", 1)]:
        assert [(r.queue_offset, bytes(r.value)) for r in rows[(t, q)]] == \
            [(m.queue_offset, m.body) for m in expected(store_dir, t, q)]


def test_user_schema_subset(spark, store_dir):
    df = (spark.read.format("strata").schema("queue_offset long, value binary")
          .option("path", str(store_dir)).option("assign", '{"audit": [0]}').load())
    rows = sorted(df.collect())
    want = expected(store_dir, "audit", 0)
    assert [(r.queue_offset, bytes(r.value)) for r in rows] == \
        [(m.queue_offset, m.body) for m in want]


def _damaged_copy(store_dir, tmp_path, damage):
    """A copy of the store with the record of orders/0 offset 7 damaged: (copy, its offset).
    ``body``: one body byte flipped (only the CRC32C sees it); ``lengths``: its body length
    one short, so its field lengths no longer add up to its total (magic, offset and the
    length at both ends still right)."""
    from strata.format import record as rec
    from strata.format.segment import HEADER_AREA

    with _ro(store_dir) as store:
        m = store.get("orders", 0, 7, max_messages=1).messages[0]
    path = tmp_path / "damaged"
    shutil.copytree(store_dir, path)
    seg = max((p for p in (path / "commitlog").iterdir() if int(p.name) <= m.commitlog_offset),
              key=lambda p: int(p.name))
    at = HEADER_AREA + m.commitlog_offset - int(seg.name)
    with open(seg, "r+b") as f:
        f.seek(at)
        raw = bytearray(f.read(m.size))
        if damage == "body":
            raw[-rec.TRAILER_SIZE - 1] ^= 0x10
        else:
            struct.pack_into("<I", raw, rec.POS_BODY_LENGTH, len(m.body) - 1)
        f.seek(at)
        f.write(raw)
    return path, m.commitlog_offset


def test_a_record_failing_its_crc_is_reported_never_served(spark, store_dir, tmp_path):
    path, phys = _damaged_copy(store_dir, tmp_path, "body")
    with pytest.raises(Exception, match=f"commit-log offset {phys} fails its CRC32C"):
        read(spark, path, assign='{"orders": [0]}').collect()
    # verifyCrc=false reads it as the structure allows (its body with the flipped bit)
    rows = read(spark, path, assign='{"orders": [0]}', verifyCrc="false").collect()
    assert len(rows) == len(expected(store_dir, "orders", 0))


def test_a_record_whose_field_lengths_do_not_add_up_is_reported(spark, store_dir, tmp_path):
    path, phys = _damaged_copy(store_dir, tmp_path, "lengths")
    for crc in ("true", "false"):
        with pytest.raises(Exception, match=f"no intact message record at commit-log offset "
                                            f"{phys}"):
            read(spark, path, assign='{"orders": [0]}', verifyCrc=crc).collect()


@pytest.mark.parametrize("opts, option", [
    ({}, "subscribe"),
    ({"subscribe": "orders", "assign": '{"orders": [0]}'}, "subscribe"),
    ({"subscribe": "nope"}, "subscribe"),
    ({"assign": '{"orders": [7]}'}, "assign"),
    ({"assign": "orders"}, "assign"),
    ({"subscribePattern": "("}, "subscribePattern"),
    ({"subscribe": "orders", "startingOffsets": "soon"}, "startingOffsets"),
    ({"subscribe": "orders", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"subscribe": "orders", "endingOffsets": '{"orders": {"0": 999999}}'}, "endingOffsets"),
    ({"subscribe": "orders", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "orders", "maxRecordsPerBatch": "many"}, "maxRecordsPerBatch"),
    ({"subscribe": "orders", "includeHeaders": "maybe"}, "includeHeaders"),
    ({"subscribe": "orders", "startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"subscribe": "orders", "verifyCrc": "perhaps"}, "verifyCrc"),
])
def test_bad_options_name_the_option(spark, store_dir, opts, option):
    with pytest.raises(Exception, match=f"option '{option}'"):
        read(spark, store_dir, **opts).collect()


def test_missing_path_names_the_option(spark):
    with pytest.raises(Exception, match="option 'path'"):
        spark.read.format("strata").option("subscribe", "t").load().collect()


# pure-Python planning checks (no Spark job)

def test_split_honours_min_partitions_without_losing_offsets():
    ranges = [QueueRange("t", 0, 5, 1005), QueueRange("t", 1, 0, 10), QueueRange("t", 2, 3, 3)]
    parts = split_ranges(ranges, 8)
    assert len(parts) >= 8
    for q, (s, e) in ((0, (5, 1005)), (1, (0, 10))):
        mine = sorted((p.start, p.end) for p in parts if p.queue_id == q)
        assert mine[0][0] == s and mine[-1][1] == e
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
        assert all(p[1] > p[0] for p in mine)
    assert not [p for p in parts if p.queue_id == 2]


def test_packing_counts_tasks_unless_min_partitions_asks_for_more():
    ranges = [QueueRange("t", q, 0, n) for q, n in enumerate((600, 300, 250, 900, 2000, 0))]
    packed = pack_ranges(ranges, 1000)
    assert sorted(sum(r.size for r in task) for task in packed) == [250, 900, 900, 2000]
    assert sorted((r.queue_id, r.start, r.end) for task in packed for r in task) == \
        [(q, 0, n) for q, n in enumerate((600, 300, 250, 900, 2000))]
    # Kafka-like split: one range per task (the store is only needed without minPartitions)
    assert [len(t) for t in plan_tasks(None, ranges, 9, 1000)] == [1] * 9


def test_option_parsing_defaults():
    o = parse_read_options({"path": "/x", "subscribe": "a, b"})
    assert o.subscribe == ("a", "b") and o.starting == "earliest" and o.ending == "latest"
    assert o.max_records_per_batch == 65536 and o.min_partitions is None
    assert o.verify_crc
    with pytest.raises(OptionError, match="option 'endingOffsets'"):
        parse_read_options({"path": "/x", "subscribe": "a",
                            "endingOffsets": '{"a": {"0": -2}}'})
