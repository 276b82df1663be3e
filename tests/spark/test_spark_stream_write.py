"""Streaming writes through df.writeStream.format("strata"): exactly once per micro-batch.

The Spark tests run real queries (file source -> strata sink, AvailableNow). The ledger and
crash tests drive ``commit_batch`` directly, some in a child process that dies (os._exit) at a
chosen point of the commit, so the store reopens through its unclean-stop recovery.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata.spark.geometry import open_readonly, store_config
from strata.spark.sink_ledger import (ENTRY_SIZE, SINKS_DIR, LedgerEntry, SinkLedger,
                                      encode_entry)
from strata.spark.stream_write import ReusedCheckpointError, commit_batch, sink_id

from spark_support import all_messages

pytestmark = pytest.mark.spark


def write_json(directory: Path, name: str, rows: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.rename(directory / name)  # the file source must never see a half-written file


def run_stream(spark, inp: Path, store: Path, ckpt: Path, **opts):
    """One AvailableNow run of input JSON files -> strata; returns [(batchId, rows)]."""
    df = (spark.readStream.schema("value string, key string, topic string, tags string, "
                                  "headers array<struct<key: string, value: string>>")
          .option("maxFilesPerTrigger", 1).json(str(inp)))
    w = (df.writeStream.format("strata").option("path", str(store))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
    for k, v in opts.items():
        w = w.option(k, v)
    q = w.start()
    try:
        q.awaitTermination(120)
    finally:
        q.stop()
    if q.exception() is not None:
        raise q.exception()
    return [(p["batchId"], p["numInputRows"]) for p in q.recentProgress]


def rows_for(file_no: int, n: int) -> list[dict]:
    return [{"value": f"f{file_no}-{i}", "key": f"k{i}" if i % 3 else None,
             "topic": "s1" if i % 2 else "s2", "tags": f"t{i % 4}" if i % 5 else None,
             "headers": [{"key": "h", "value": f"x{i}"}] if i % 7 == 0 else None}
            for i in range(n)]


def test_stream_write_read_back_equals_written_rows(spark, tmp_path):
    inp, store, ckpt = tmp_path / "in", tmp_path / "store", tmp_path / "ckpt"
    written = rows_for(0, 120) + rows_for(1, 80)
    write_json(inp, "f0.json", written[:120])
    write_json(inp, "f1.json", written[120:])
    progress = run_stream(spark, inp, store, ckpt)
    assert [n for _b, n in progress if n] == [120, 80]  # two micro-batches
    got = all_messages(store, "s1") + all_messages(store, "s2")
    assert sorted(m.body for m in got) == sorted(r["value"].encode() for r in written)
    back = (spark.read.format("strata").option("path", str(store)).option("subscribe", "s1,s2")
            .option("includeMetadata", "true").option("includeHeaders", "true").load())
    seen = {(bytes(r.value).decode(), bytes(r.key).decode() if r.key is not None else None,
             r.topic, r.tags, tuple((h.key, bytes(h.value).decode()) for h in r.headers) or None)
            for r in back.collect()}
    assert seen == {(r["value"], r["key"], r["topic"], r["tags"],
                     tuple((h["key"], h["value"]) for h in r["headers"]) if r["headers"]
                     else None) for r in written}
    # one ledger entry per non-empty batch; nothing left staged or in the write-ahead area
    sink = next((store / SINKS_DIR).iterdir())
    assert os.path.getsize(sink / "ledger") == 2 * ENTRY_SIZE
    assert sorted(p.name for p in sink.iterdir()) == ["ledger", "sink.json"]
    assert not (store / "spark-staging").exists()


def test_replayed_batch_appends_nothing(spark, tmp_path):
    inp, store, ckpt = tmp_path / "in", tmp_path / "store", tmp_path / "ckpt"
    write_json(inp, "f0.json", rows_for(0, 50))
    write_json(inp, "f1.json", rows_for(1, 30))
    run_stream(spark, inp, store, ckpt, topic="t")
    assert len(all_messages(store, "t")) == 80
    # A crash after the sink's commit but before Spark recorded it: Spark's commit log lacks
    # the last batch, so the restarted query runs that batch again.
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    progress = run_stream(spark, inp, store, ckpt, topic="t")
    assert (last, 30) in progress  # the batch really was replayed through the sink ...
    bodies = [m.body for m in all_messages(store, "t")]
    assert len(bodies) == 80 and len(set(bodies)) == 80  # ... and appended nothing
    write_json(inp, "f2.json", rows_for(2, 10))  # the query goes on normally afterwards
    run_stream(spark, inp, store, ckpt, topic="t")
    bodies = [m.body for m in all_messages(store, "t")]
    assert len(bodies) == 90 and len(set(bodies)) == 90


def test_stream_write_errors_name_the_problem(spark, tmp_path):
    inp = tmp_path / "in"
    write_json(inp, "f0.json", [{"value": "a"}])
    df = spark.readStream.schema("value string").json(str(inp))
    with pytest.raises(Exception, match="option 'topic'"):  # no topic column, no option
        q = (df.writeStream.format("strata").option("path", str(tmp_path / "s"))
             .option("checkpointLocation", str(tmp_path / "c1")).trigger(availableNow=True)
             .start())
        q.awaitTermination(60)
        if q.exception() is not None:
            raise q.exception()
    bad = df.selectExpr("length(value) AS value")
    with pytest.raises(Exception, match="column 'value' must be binary or string"):
        q = (bad.writeStream.format("strata").option("path", str(tmp_path / "s"))
             .option("topic", "t").option("checkpointLocation", str(tmp_path / "c2"))
             .trigger(availableNow=True).start())
        q.awaitTermination(60)
        if q.exception() is not None:
            raise q.exception()


# ---------------------------------------------------------------- the commit, without Spark

def stage(directory: Path, name: str, values: list[str]) -> str:
    """A staged file as a write task leaves it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    batch = pa.record_batch([pa.array([v.encode() for v in values], pa.binary())],
                            names=["value"])
    with pa.ipc.new_file(str(path), batch.schema) as w:
        w.write_batch(batch)
    return str(path)


def new_store(path: Path) -> None:
    with strata.open(path, strata.StoreConfig(segment_size=64 * 1024, prefault=False)) as s:
        s.create_topic("t", queues=2)


def test_commit_twice_appends_once(tmp_path):
    store = tmp_path / "store"
    new_store(store)
    files = [stage(tmp_path / "st", "a.arrow", [f"a{i}" for i in range(30)]),
             stage(tmp_path / "st", "b.arrow", [f"b{i}" for i in range(20)])]
    assert commit_batch(str(store), "s" * 32, 0, files, "t") == 50
    again = [stage(tmp_path / "st2", "a.arrow", [f"other{i}" for i in range(7)])]
    assert commit_batch(str(store), "s" * 32, 0, again, "t") == 0
    assert commit_batch(str(store), "s" * 32, 1, [], "t") == 0  # empty batch: no entry
    assert commit_batch(str(store), "x" * 32, 0, again, "t") == 7  # another sink
    bodies = sorted(m.body for m in all_messages(store, "t"))
    assert bodies == sorted([f"a{i}".encode() for i in range(30)] +
                            [f"b{i}".encode() for i in range(20)] +
                            [f"other{i}".encode() for i in range(7)])
    with open_readonly(store) as s:  # every message carries the commit's time as born time
        m = s.get("t", 0, 0).messages[0]
        assert 0 < m.born_timestamp <= m.store_timestamp


CRASH_SCRIPT = textwrap.dedent("""
    import os, sys
    import strata.spark.stream_write as sw
    store, staged, point, k = sys.argv[1], sys.argv[2].split(","), sys.argv[3], int(sys.argv[4])
    real_append = sw.append_messages
    def crashing_append(st, msgs):
        if point == "before-append":
            os._exit(17)
        if point == "mid-append":   # only a prefix of the batch reaches the log
            st.put_batch(msgs[:k])
            os._exit(17)
        real_append(st, msgs)
        if point == "after-append":
            os._exit(17)
    sw.append_messages = crashing_append
    sw.commit_batch(store, "c" * 32, 4, staged, "t")
""")


@pytest.mark.parametrize("point, k", [("before-append", 0), ("mid-append", 23),
                                      ("after-append", 0)])
def test_crash_during_commit_then_replay_appends_each_row_once(tmp_path, point, k):
    store = tmp_path / "store"
    new_store(store)
    original = [f"v{i}" for i in range(60)]
    files = [stage(tmp_path / "st", "p0.arrow", original[:40]),
             stage(tmp_path / "st", "p1.arrow", original[40:])]
    r = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(store), ",".join(files), point,
                        str(k)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 17, r.stderr
    with strata.open(store, store_config(store, for_writing=True)):
        pass  # recovery after the crash, as the next writer would run it
    with open_readonly(store) as s:
        in_log = sum(s.max_offset("t", q) for q in range(2))
    assert in_log == {"before-append": 0, "mid-append": k, "after-append": 60}[point]
    # Spark replays batch 4; its rows may even differ (a non-deterministic query): the commit
    # completes the batch from the rows saved with the ledger entry, never from the replay.
    replay = [stage(tmp_path / "st3", "p0.arrow", [f"replayed{i}" for i in range(5)])]
    appended = commit_batch(str(store), "c" * 32, 4, replay, "t")
    assert appended == 60 - in_log
    bodies = [m.body for m in all_messages(store, "t")]
    assert sorted(bodies) == sorted(v.encode() for v in original)
    assert commit_batch(str(store), "c" * 32, 4, replay, "t") == 0
    ledger_dir = store / SINKS_DIR / ("c" * 32)
    assert not SinkLedger(ledger_dir).wal_dir(4).exists()
    with strata.open(store) as s:  # a writer reopens the store cleanly after all that
        assert sum(s.max_offset("t", q) for q in range(2)) == 60


def test_ledger_ignores_a_torn_last_entry_and_finds_batches(tmp_path):
    ledger = SinkLedger(tmp_path / "sink")
    for b in (3, 4, 4, 6):
        ledger.append(LedgerEntry(b, 100 * b, 0, 10, 1234))
    with open(ledger.path, "ab") as f:  # a crash while writing the next entry
        f.write(encode_entry(LedgerEntry(7, 700, 0, 10, 1234))[:30])
    assert ledger.find(7) == (None, 6)
    assert ledger.find(5) == (None, 6)
    assert ledger.find(4)[0] == LedgerEntry(4, 400, 0, 10, 1234)
    ledger.append(LedgerEntry(7, 700, 0, 10, 1234))  # cuts the torn bytes first
    assert os.path.getsize(ledger.path) == 5 * ENTRY_SIZE
    assert ledger.find(7) == (LedgerEntry(7, 700, 0, 10, 1234), 7)


def test_old_batch_id_for_a_sink_with_newer_batches_is_refused(tmp_path):
    store = tmp_path / "store"
    new_store(store)
    for b in (0, 1):
        commit_batch(str(store), "r" * 32, b, [stage(tmp_path / f"s{b}", "p.arrow", ["x"])], "t")
    with pytest.raises(ReusedCheckpointError, match="reusing the checkpoint location"):
        commit_batch(str(store), "r" * 32, 0, [stage(tmp_path / "s9", "p.arrow", ["y"])], "t")
    assert len(all_messages(store, "t")) == 2


def test_sink_id_follows_the_checkpoint_and_its_query_id(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    before, qid = sink_id(str(ckpt))
    assert qid == ""
    (ckpt / "metadata").write_text('{"id":"5f0c6f2e-1111-2222-3333-444455556666"}\n')
    first, qid = sink_id(str(ckpt))
    assert qid == "5f0c6f2e-1111-2222-3333-444455556666" and first != before
    assert sink_id(f"file://{ckpt}")[1] == qid
    (ckpt / "metadata").write_text('{"id":"99999999-1111-2222-3333-444455556666"}\n')
    assert sink_id(str(ckpt))[0] != first  # checkpoint deleted and recreated: a new sink


def test_commit_into_a_store_open_for_writing_elsewhere_is_refused(tmp_path):
    from strata.spark.write import StoreBusyError
    store = tmp_path / "store"
    new_store(store)
    files = [stage(tmp_path / "st", "p.arrow", ["a", "b"])]
    with strata.open(store, store_config(store, for_writing=True)):  # holds the writer lock
        with pytest.raises(StoreBusyError, match="open for writing in another process"):
            commit_batch(str(store), "b" * 32, 0, files, "t", lock_wait_s=0.2)
    assert SinkLedger(store / SINKS_DIR / ("b" * 32)).find(0) == (None, None)  # nothing recorded
    assert commit_batch(str(store), "b" * 32, 0, files, "t") == 2  # the staged rows are intact
