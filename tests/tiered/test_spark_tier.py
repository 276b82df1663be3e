"""``spark.read.format("strata")`` over tiered history: a store whose oldest files are gone
(tier below the local minimum, local files above it: no duplicate, no gap), a tier alone with
no store directory (``tierUrl``, POSIX and moto's S3 server), bad options, damaged objects."""

from __future__ import annotations

import shutil

import pytest

import strata
from strata.spark.options import OptionError, parse_read_options
from strata.spark.source import StrataDataSource, TierPartition
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadPolicy
from strata.tiered.layout import parse_chunk_path
from tier_helpers import TOPICS, fill, tier_config

pytestmark = pytest.mark.spark

COLUMNS = "topic, queue_id, queue_offset, value, key, timestamp"
META_COLUMNS = COLUMNS + ", tags, keys, msg_id, commitlog_offset, born_timestamp, headers"


@pytest.fixture
def small_chunks():
    """Chunks of at most 40 messages; no background uploads (only tier_sync)."""
    tier_service.DEFAULT_POLICY = UploadPolicy(chunk_messages=40, commit_every=3,
                                               min_chunk_bytes=1 << 40, max_delay_s=3600)
    yield
    tier_service.DEFAULT_POLICY = None


def rows(spark, columns: str = COLUMNS, **options):
    reader = spark.read.format("strata")
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(tuple(r) for r in reader.load().selectExpr(*columns.split(", ")).collect())


def expected(store) -> list[tuple]:
    """(topic, queue, offset, body) of every message the store holds locally now."""
    out = []
    for topic in store.topics():
        for q in range(store.queue_count(topic)):
            off = store.min_offset(topic, q)
            while off < store.max_offset(topic, q):
                r = store.get(topic, q, off, 500)
                out += [(m.topic, m.queue_id, m.queue_offset, m.body) for m in r.messages]
                off = r.next_offset
    return sorted(out)


def plan(**options):
    src = StrataDataSource(options)
    return src.reader(src.schema()).partitions()


def test_store_and_tier_read_as_one_history(spark, tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 1500)
        store.wait_dispatched()
        full = expected(store)
        store.tier_sync(timeout_s=60)
        assert store.clean_expired(force=True) > 0        # the oldest segments are gone
        fill(store, 300, start=1500)                       # local only: not uploaded
        store.wait_dispatched()
        full = sorted(set(full) | set(expected(store)))   # old history + the local part
        local_min = {(t, q): store.queues.get(t, q).min_offset() for t in TOPICS for q in
                     range(store.queue_count(t))}
    assert any(v > 0 for v in local_min.values())
    got = rows(spark, subscribe=",".join(TOPICS), path=str(tmp_store_dir))
    assert [(t, q, o, bytes(v)) for t, q, o, v, _k, _ts in got] == full   # no gap, no dup
    # below each queue's local minimum the tasks read tier chunks, each span inside its chunk
    parts = plan(subscribe=",".join(TOPICS), path=str(tmp_store_dir))
    tier_parts = [p for p in parts if isinstance(p, TierPartition)]
    assert tier_parts
    for p in tier_parts:
        for s in p.spans:
            assert s.first <= s.start < s.end <= s.first + s.count
            assert s.end <= local_min[(s.topic, s.queue_id)]
    # a range that starts in the tier and ends locally
    t, q = max(local_min, key=local_min.get)
    lo, hi = local_min[(t, q)] - 5, local_min[(t, q)] + 5
    got = rows(spark, assign=f'{{"{t}": [{q}]}}', path=str(tmp_store_dir),
               startingOffsets=f'{{"{t}": {{"{q}": {lo}}}}}',
               endingOffsets=f'{{"{t}": {{"{q}": {hi}}}}}')
    assert [r[2] for r in got] == list(range(lo, hi))


def test_a_tier_alone_reads_like_the_store(spark, tier, tmp_path, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 900)
        store.tier_sync(timeout_s=60)
    opts = dict(subscribe=",".join(TOPICS), includeMetadata="true", includeHeaders="true")
    want = rows(spark, META_COLUMNS, path=str(tmp_store_dir), **opts)
    shutil.rmtree(tmp_store_dir)                          # no store directory at all
    tier_opts = dict(tierUrl=tier.url, **({"tierEndpointUrl": tier.endpoint}
                                          if tier.endpoint else {}))
    got = rows(spark, META_COLUMNS, **tier_opts, **opts)
    assert len(got) == 900 and got == want
    # one queue's read fetches only that queue's objects
    for p in plan(assign='{"orders": [1]}', **tier_opts):
        assert isinstance(p, TierPartition)
        assert {(s.topic, s.queue_id) for s in p.spans} == {("orders", 1)}
    # time options and pushed filters resolve against the tier
    ts = sorted(r[5] for r in want)[450]
    got = rows(spark, startingTimestamp=str(int(ts.timestamp() * 1000)), **tier_opts,
               subscribe=",".join(TOPICS))
    assert got and all(r[5] >= ts for r in got)
    assert len(got) == sum(1 for r in want if r[5] >= ts)


def test_bad_tier_options_are_named(spark, tmp_path):
    cases = [
        ({"tierUrl": "ftp://host/x"}, "tierUrl", "unknown scheme"),
        ({"tierUrl": "file://relative/dir"}, "tierUrl", "absolute"),
        ({"tierUrl": "s3://"}, "tierUrl", "missing bucket"),
        ({"tierEndpointUrl": "http://127.0.0.1:1"}, "tierEndpointUrl", "needs option"),
        ({"tierUrl": f"file://{tmp_path}", "tierEndpointUrl": "http://127.0.0.1:1"},
         "tierEndpointUrl", "only an s3:// tier"),
        ({"tierUrl": "s3://bucket", "tierEndpointUrl": "127.0.0.1:9000"}, "tierEndpointUrl",
         "http://"),
        ({"tierUrl": f"file://{tmp_path}", "path": str(tmp_path)}, "tierUrl", "not both"),
    ]
    for opts, option, words in cases:
        with pytest.raises(OptionError, match=words) as e:
            parse_read_options({"subscribe": "orders", **opts})
        assert e.value.option == option, opts
    empty = tmp_path / "empty-tier"
    empty.mkdir()
    with pytest.raises(Exception, match="holds no strata tier"):
        spark.read.format("strata").option("tierUrl", f"file://{empty}") \
            .option("subscribe", "orders").load().count()
    assert list(empty.iterdir()) == []                    # nothing written
    with pytest.raises(Exception, match="no such directory"):
        spark.read.format("strata").option("tierUrl", f"file://{tmp_path}/none") \
            .option("subscribe", "orders").load().count()
    assert not (tmp_path / "none").exists()
    with pytest.raises(OptionError, match="batch"):
        from strata.spark.options import parse_stream_read_options
        parse_stream_read_options({"tierUrl": f"file://{empty}", "subscribe": "orders"})


def test_a_damaged_tier_object_is_named_never_served(spark, tmp_path, tmp_store_dir,
                                                     small_chunks):
    tier_dir = tmp_path / "tier"
    cfg = tier_config(type("T", (), {"url": f"file://{tier_dir}", "endpoint": None})())
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 400)
        store.tier_sync(timeout_s=60)
    logs = sorted(p for p in tier_dir.rglob("*.log")
                  if parse_chunk_path(str(p.relative_to(tier_dir))))
    victim = logs[len(logs) // 2]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40                          # a flipped bit inside some body
    victim.write_bytes(bytes(data))
    topic, qid, _first, _ = parse_chunk_path(str(victim.relative_to(tier_dir)))
    with pytest.raises(Exception) as e:
        rows(spark, tierUrl=f"file://{tier_dir}", assign=f'{{"{topic}": [{qid}]}}')
    assert "fails its checks" in str(e.value) and victim.name in str(e.value)
    # the other queues are intact and still read
    other = [t for t in TOPICS if t != topic][0]
    assert len(rows(spark, tierUrl=f"file://{tier_dir}", subscribe=other)) == 200


def test_read_planning_without_spark_finds_gaps(tmp_path, tmp_store_dir, small_chunks):
    """Offsets neither on the tier nor local (deleted before upload) are data loss."""
    tier_dir = tmp_path / "tier"
    cfg = tier_config(type("T", (), {"url": f"file://{tier_dir}", "endpoint": None})())
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 2000)                                 # 125 per queue: 4 chunks each
        store.tier_sync(timeout_s=60)
    from strata.spark.tier_read import History
    h = History.open(parse_read_options({"tierUrl": f"file://{tier_dir}",
                                         "subscribe": "orders"}))
    try:
        q = h.meta.queue("orders", 0)
        del q.chunks[1]                                   # a hole in the tier's history
        from strata.spark.planning import QueueRange
        r = QueueRange("orders", 0, 0, q.max_offset())
        with pytest.raises(OptionError, match="failOnDataLoss"):
            h.split(r, True)
        spans, local = h.split(r, False)
        assert sum(s.end - s.start for s in spans) == q.max_offset() - 40
        assert local.start == local.end == q.max_offset()
    finally:
        h.close()
