"""Batch writes through df.write.format("strata"): staged by tasks, appended by the commit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import strata
from strata.spark.geometry import open_readonly

from spark_support import all_messages

pytestmark = pytest.mark.spark


def write(df, path, **opts):
    w = df.write.format("strata").mode("append").option("path", str(path))
    for k, v in opts.items():
        w = w.option(k, v)
    w.save()


def test_write_then_read_back_equals_written_rows(spark, tmp_path):
    path = tmp_path / "store"
    rows = [(f"v{i}".encode(), f"k{i}" if i % 3 else None, "w1" if i % 2 else "w2",
             f"tag{i % 4}" if i % 5 else None,
             [("h", f"x{i}".encode())] if i % 7 == 0 else None) for i in range(500)]
    df = spark.createDataFrame(
        rows, "value binary, key string, topic string, tags string, "
              "headers array<struct<key: string, value: binary>>").repartition(3)
    write(df, path)
    assert not (path / "spark-staging").exists()
    written = {r[0]: r for r in rows}
    got = all_messages(path, "w1") + all_messages(path, "w2")
    assert len(got) == 500
    for m in got:
        v, k, t, tg, h = written[m.body]
        assert m.topic == t and m.tags == tg
        assert m.keys == ((k,) if k else ())
        assert m.properties == {hk: hv.decode() for hk, hv in (h or [])}
    back = (spark.read.format("strata").option("path", str(path)).option("subscribe", "w1,w2")
            .option("includeMetadata", "true").option("includeHeaders", "true").load())
    seen = {(bytes(r.value), bytes(r.key).decode() if r.key is not None else None, r.topic,
             r.tags, tuple((h.key, bytes(h.value)) for h in r.headers) or None)
            for r in back.collect()}
    assert seen == {(v, k, t, tg, tuple(h) if h else None) for v, k, t, tg, h in rows}


def test_topic_option_queue_id_column_and_string_values(spark, tmp_path):
    path = tmp_path / "store"
    df = spark.createDataFrame([(f"s{i}", i % 2) for i in range(40)], "value string, queue_id int")
    write(df, path, topic="opt")
    write(df, path, topic="opt")  # a second job appends after the first
    with open_readonly(path) as store:
        assert store.topics() == ["opt"]
        for q in (0, 1):
            assert store.max_offset("opt", q) == 40
            got = store.get("opt", q, 0, max_messages=100).messages
            assert [m.body for m in got] == [f"s{i}".encode() for i in range(40) if i % 2 == q] * 2
            assert [m.queue_offset for m in got] == list(range(40))


def test_write_into_existing_store_keeps_its_geometry(spark, tmp_path, store_dir):
    import shutil
    path = tmp_path / "copy"
    shutil.copytree(store_dir, path)
    df = spark.createDataFrame([(b"new",)], "value binary")
    write(df, path, topic="audit")
    assert [m.body for m in all_messages(path, "audit")].count(b"new") == 1
    assert len(all_messages(path, "audit")) == 701
    assert len(all_messages(path, "orders")) == 3000


@pytest.mark.parametrize("ddl, rows, opts, match", [
    ("key string", [("a",)], {"topic": "t"}, "'value' column"),
    ("value int", [(1,)], {"topic": "t"}, "column 'value' must be binary or string"),
    ("value binary", [(b"x",)], {}, "option 'topic'"),
    ("value binary, queue_id string", [(b"x", "a")], {"topic": "t"}, "column 'queue_id'"),
    ("value binary, headers array<string>", [(b"x", ["a"])], {"topic": "t"}, "column 'headers'"),
    ("value binary", [(b"x",)], {"topic": "../x"}, "option 'topic'"),
])
def test_bad_schema_or_options_give_clear_errors(spark, tmp_path, ddl, rows, opts, match):
    path = tmp_path / "store"
    with pytest.raises(Exception, match=match):
        write(spark.createDataFrame(rows, ddl), path, **opts)
    assert not (path / "commitlog").exists() or not all_messages(path, "t")


def test_failed_job_appends_nothing(spark, tmp_path):
    path = tmp_path / "store"
    write(spark.createDataFrame([(b"first",)], "value binary"), path, topic="t")
    # one row has a null value: its task fails, the other partitions' staged rows are dropped
    df = spark.createDataFrame([(b"a",), (b"b",), (None,), (b"c",)], "value binary").repartition(2)
    with pytest.raises(Exception, match="column 'value' has a null"):
        write(df, path, topic="t")
    # a queue id the topic does not have fails in the commit, after every task staged its rows
    bad = spark.createDataFrame([(b"a", 0), (b"b", 99)], "value binary, queue_id int")
    with pytest.raises(Exception, match="column 'queue_id' is 99"):
        write(bad, path, topic="t")
    assert [m.body for m in all_messages(path, "t")] == [b"first"]
    assert not (path / "spark-staging").exists()


def test_overwrite_mode_is_refused(spark, tmp_path):
    df = spark.createDataFrame([(b"x",)], "value binary")
    with pytest.raises(Exception, match="mode"):
        (df.write.format("strata").mode("overwrite").option("path", str(tmp_path / "s"))
         .option("topic", "t").save())


def test_store_open_for_writing_elsewhere_is_refused(spark, tmp_path):
    path = tmp_path / "store"
    strata.open(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, strata
            s = strata.open({str(path)!r})
            print("open", flush=True)
            sys.stdin.read()
            s.close()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        df = spark.createDataFrame([(b"x",)], "value binary")
        with pytest.raises(Exception, match="open for writing in another process"):
            write(df, path, topic="t")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert all_messages(path, "t") == []


RETRY_SCRIPT = textwrap.dedent("""
    # Its own local[2,3] session (a task may fail 3 times): a UDF fails the first attempt of the
    # task that holds one chosen row, after that task has handed earlier rows to the sink.
    import json, os, sys
    from pathlib import Path
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    store, inp, ckpt, markers = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2,3]").appName("strata-retry")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
             .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
             .getOrCreate())

    def failing_once(v, doomed):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if v == doomed and ctx.attemptNumber() == 0:
            Path(markers, f"{doomed}-p{ctx.partitionId()}").write_text("failed once")
            raise RuntimeError("injected failure of a write task's first attempt")
        return v

    batch_udf = udf(lambda v: failing_once(v, "b-250"), "string")
    (spark.range(0, 400, 1, 2).selectExpr("concat('b-', id) AS v")
     .select(batch_udf("v").alias("value"))
     .write.format("strata").mode("append").option("path", store).option("topic", "batch")
     .save())

    stream_udf = udf(lambda v: failing_once(v, "s-150"), "string")
    q = (spark.readStream.schema("v string").json(inp).repartition(2)
         .select(stream_udf("v").alias("value"))
         .writeStream.format("strata").option("path", store).option("topic", "stream")
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination(240)
    if q.exception() is not None:
        raise q.exception()
    spark.stop()
    print("done", flush=True)
""")


def test_task_retry_under_local_2_3_leaves_no_duplicates(tmp_path):
    """A write task whose first attempt fails is retried by Spark; batch and streaming writes
    still append every row exactly once (only the successful attempt's staged file counts)."""
    import json
    import os

    store, inp, ckpt, markers = (tmp_path / n for n in ("store", "in", "ckpt", "markers"))
    inp.mkdir()
    markers.mkdir()
    (inp / "rows.json").write_text("".join(json.dumps({"v": f"s-{i}"}) + "\n"
                                           for i in range(300)))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    r = subprocess.run([sys.executable, "-c", RETRY_SCRIPT, str(store), str(inp), str(ckpt),
                        str(markers)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
    # each doomed row's task really failed once (and was retried: the jobs succeeded)
    assert sorted(p.name.split("-p")[0] for p in markers.iterdir()) == ["b-250", "s-150"]
    batch = [m.body for m in all_messages(store, "batch")]
    assert sorted(batch) == sorted(f"b-{i}".encode() for i in range(400))
    stream = [m.body for m in all_messages(store, "stream")]
    assert sorted(stream) == sorted(f"s-{i}".encode() for i in range(300))
    assert not (store / "spark-staging").exists()


def test_small_commits_into_an_empty_small_store_keep_its_sizes_and_spread_over_queues(
        spark, tmp_path):
    """The sink opens the store for each commit: it must use the sizes the store was made with
    (not 1 GiB segments), and round-robin must go on where the last commit stopped."""
    from spark_support import small_store_config
    path = tmp_path / "store"
    with strata.open(path, small_store_config()) as store:
        store.create_topic("few", queues=4)
    df = spark.createDataFrame([(b"a",), (b"b",), (b"c",)], "value binary").coalesce(1)
    write(df, path, topic="few")
    write(df, path, topic="few")
    sizes = {p.stat().st_size for p in (path / "commitlog").iterdir() if p.name.isdigit()}
    assert max(sizes) < 1 << 20
    with open_readonly(path) as store:
        assert [store.max_offset("few", q) for q in range(4)] == [2, 2, 1, 1]


def _staged_file(path, batches):
    import pyarrow as pa
    schema = pa.schema([("value", pa.binary()), ("queue_id", pa.int32())])
    with pa.ipc.new_file(str(path), schema) as w:
        for rows in batches:
            w.write_batch(pa.record_batch([pa.array([v for v, _ in rows], pa.binary()),
                                           pa.array([q for _, q in rows], pa.int32())],
                                          schema=schema))
    return str(path)


def test_a_commit_appends_one_staged_batch_at_a_time_after_checking_them_all(tmp_path):
    """No Spark job: the commit's append of staged files (write.append_staged)."""
    from spark_support import small_store_config

    from strata.spark.write import SchemaError, append_staged

    path = tmp_path / "store"
    with strata.open(path, small_store_config()) as store:
        store.create_topic("c", queues=2)
    rows = [(b"r%d" % i, i % 2) for i in range(50)]
    files = [_staged_file(tmp_path / "a.arrow", [rows[:10], rows[10:25]]),
             _staged_file(tmp_path / "b.arrow", [rows[25:]])]
    bad = _staged_file(tmp_path / "bad.arrow", [[(b"late", 5)]])   # queue 5 of 2: refused
    with strata.open(path, small_store_config()) as store:
        with pytest.raises(SchemaError, match="queue_id' is 5"):
            append_staged(store, files + [bad], "c", born_timestamp=1)
        assert [store.max_offset("c", q) for q in (0, 1)] == [0, 0]   # nothing appended
        sizes = []
        put = store.put_batch
        store.put_batch = lambda msgs: sizes.append(len(msgs)) or put(msgs)
        assert append_staged(store, files, "c", born_timestamp=1) == 50
    assert sizes == [10, 15, 25]                                   # one put per staged batch
    got = all_messages(path, "c")
    assert sorted((m.body, m.queue_id) for m in got) == sorted(rows)
    assert {m.born_timestamp for m in got} == {1}
