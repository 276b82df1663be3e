"""Spark read throughput of the strata data source against Parquet, and the maintenance jobs.

    .venv/bin/python bench/spark_read.py [--rows 2000000] [--size 100] [--runs 3] [--job-runs 2]
                                         [--warmup 4] [--queues 8,2] [--only read,jobs]
                                         [--segment-mib 64] [--dir D]

One JSON object per line:

* ``build``: one store per ``--queues`` count (``--rows`` messages of ``--size`` distinct random
  bytes, one topic, ``--segment-mib`` segments) and a Parquet copy of the first store's rows
  (written once, from the strata read, snappy, so both hold the same columns and bytes).
* ``read``: ``spark.read.format("strata") ... .write.format("noop")`` per store and
  ``spark.read.parquet(...).write.format("noop")`` on ``local[2]``; the noop sink materialises
  every column, unlike ``count()``. After ``--warmup`` rounds of every read (Spark's JIT
  keeps speeding up the Parquet path over the first few reads of a session; with one warm-up
  the store read first was compared with a slower Parquet), ``--runs`` rounds run every
  read of a store once, in turn (interleaved, so a slow spell of the shared machine hits all
  alike); ``seconds``/``rows_s`` are the best round, ``median_s`` the median. ``jvm_cpu_s`` and
  ``python_cpu_s``: median CPU seconds the JVM and the Python workers spent on one read (from
  /proc). ``tasks`` is the Spark partition count the strata source planned (small queue ranges
  share a task, up to 1,000,000 offsets each); ``source: strata_one_task_per_queue`` is the same
  read with ``minPartitions`` = queues (one task per queue, Kafka's layout), to show what
  packing saves.
* ``read`` with ``source: python_ds_ceiling``: a throwaway Python data source with the strata
  schema and as many partitions as the strata read planned that yields one pre-built 65,536-row
  Arrow batch (random 100-byte values) over and over: what Spark's Python data source path
  costs with no store access and no decoding at all, i.e. the most any Python source can reach.
* ``ratio``: strata rows/s ÷ Parquet rows/s of the best rounds (target ≥ 0.8), the same ratio
  round by round and its median, strata ÷ the ceiling, and each read's CPU seconds (JVM +
  Python workers).
* ``jobs``: ``verify`` and ``rebuild-index`` MB/s of commit log (first store) on ``local[1]``
  and ``local[2]`` (best of ``--job-runs`` rounds that alternate the two, after a warm-up), and
  the local[2] ÷ local[1] ratio.

Nothing asserts a time; scratch data lives in a fresh directory that is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import strata

TOPIC = "bench"


def emit(**kw) -> None:
    print(json.dumps({"bench": "spark_read", **kw}), flush=True)


def build_store(path: Path, rows: int, size: int, segment_mib: int, queues: int) -> float:
    cfg = strata.StoreConfig(segment_size=segment_mib << 20, prefault=False)
    t0 = time.perf_counter()
    with strata.open(path, cfg) as store:
        store.create_topic(TOPIC, queues=queues)
        batch = 4096
        for i in range(0, rows, batch):
            n = min(batch, rows - i)
            blob = os.urandom(n * size)       # every body distinct: Parquet cannot dedupe them
            store.put_batch([strata.Message(TOPIC, blob[j * size:(j + 1) * size])
                             for j in range(n)])
        store.wait_dispatched()
    return time.perf_counter() - t0


def session(master: str):
    from strata.spark.jobs import spark_session
    return spark_session(master, "strata-bench")


def log_bytes(path: Path) -> int:
    from strata.spark.geometry import open_readonly
    store = open_readonly(path)
    try:
        return store.confirmed_offset() - store.log.min_offset()
    finally:
        store.close()


def ceiling_source(rows: int, size: int, queues: int):
    """A Python data source shaped like strata's (schema, ``queues`` partitions) whose reads
    cost nothing: every partition yields the same pre-built batch."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from strata.spark.schema import read_schema

    per_queue = rows // queues

    class CeilingReader(DataSourceReader):
        def __init__(self, schema):
            self.schema = schema

        def partitions(self):
            return [InputPartition(q) for q in range(queues)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa

            from strata.spark.schema import arrow_schema
            n = 65536
            sch = arrow_schema(self.schema)
            offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * size).tobytes())
            value = pa.Array.from_buffers(pa.binary(), n, [None, offsets,
                                                           pa.py_buffer(os.urandom(n * size))])
            topic = pa.array([TOPIC] * n, pa.string())
            key = pa.nulls(n, pa.binary())
            ts = pa.array(np.full(n, 1_700_000_000_000_000, np.int64)).cast(sch.field(5).type)
            batch = pa.RecordBatch.from_arrays(
                [key, value, topic, pa.array(np.full(n, partition.value, np.int32)),
                 pa.array(np.arange(n, dtype=np.int64)), ts,
                 pa.array(np.ones(n, np.int32))], schema=sch)
            left = per_queue
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return f"strata_bench_ceiling_{queues}"

        def schema(self):
            return read_schema()

        def reader(self, schema):
            return CeilingReader(schema)

    return Ceiling


def descendants_cpu() -> dict[str, float]:
    """CPU seconds (user + system, with their reaped children) of this process's descendants,
    by kind: ``jvm`` (Spark's driver and executors in local mode) and ``python`` (the Python
    workers that run data sources), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, str, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        close = stat.rindex(")")
        fields = stat[close + 2:].split()
        name = stat[stat.index("(") + 1:close]
        procs[int(d)] = (int(fields[1]), name, sum(map(int, fields[11:15])) / tick)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _name, _cpu) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out = {"jvm": 0.0, "python": 0.0}
    stack = list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        _ppid, name, cpu = procs[pid]
        if name == "java":
            out["jvm"] += cpu
        elif name.startswith("python"):
            out["python"] += cpu
        stack.extend(children.get(pid, []))
    return out


class Runs:
    """Wall and CPU seconds of one read, run in rounds interleaved with the other reads (so
    a slow spell of the shared machine hits every source alike)."""

    def __init__(self, name: str, fn) -> None:
        self.name, self.fn = name, fn
        self.seconds: list[float] = []
        self.jvm: list[float] = []
        self.python: list[float] = []

    def run(self) -> None:
        c0 = descendants_cpu()
        t0 = time.perf_counter()
        self.fn()
        self.seconds.append(time.perf_counter() - t0)
        c1 = descendants_cpu()
        self.jvm.append(c1["jvm"] - c0["jvm"])
        self.python.append(c1["python"] - c0["python"])

    def row(self, rows: int, **kw) -> dict:
        s = min(self.seconds)
        return dict(case="read", source=self.name, master="local[2]", rows=rows, **kw,
                    seconds=round(s, 3), median_s=round(statistics.median(self.seconds), 3),
                    rows_s=round(rows / s),
                    jvm_cpu_s=round(statistics.median(self.jvm), 2),
                    python_cpu_s=round(statistics.median(self.python), 2))


def interleaved(reads: list[Runs], runs: int, warmup: int = 1) -> None:
    for _ in range(warmup):                # Python workers, page cache, the JVM's JIT
        for r in reads:
            r.fn()
    for _ in range(runs):
        for r in reads:
            r.run()


def bench_read(stores: dict[int, Path], parquet: Path, rows: int, size: int,
               runs: int, warmup: int) -> None:
    spark = session("local[2]")
    try:
        def strata_read(store, **opts):
            r = spark.read.format("strata").option("path", str(store)).option("subscribe", TOPIC)
            for k, v in opts.items():
                r = r.option(k, v)
            return r.load()

        def noop(df):
            return lambda: df.write.format("noop").mode("overwrite").save()

        first = next(iter(stores.values()))
        t0 = time.perf_counter()
        strata_read(first).write.mode("overwrite").parquet(str(parquet))
        emit(case="build", what="parquet", rows=rows, seconds=round(time.perf_counter() - t0, 2),
             MB=round(sum(p.stat().st_size for p in parquet.rglob("*.parquet")) / 1e6, 1))
        parts = spark.read.parquet(str(parquet)).rdd.getNumPartitions()
        registered: set[int] = set()
        for q, store in stores.items():
            tasks = strata_read(store).rdd.getNumPartitions()
            if tasks not in registered:
                spark.dataSource.register(ceiling_source(rows, size, tasks))
                registered.add(tasks)
            pq = Runs("parquet", noop(spark.read.parquet(str(parquet))))
            st = Runs("strata", noop(strata_read(store)))
            ce = Runs("python_ds_ceiling", noop(spark.read.format(
                f"strata_bench_ceiling_{tasks}").load()))
            reads = [pq, st, ce]
            if tasks != q:
                reads.append(Runs("strata_one_task_per_queue",
                                  noop(strata_read(store, minPartitions=str(q)))))
            interleaved(reads, runs, warmup)
            emit(**pq.row(rows, queues=q, tasks=parts))
            emit(**st.row(rows, queues=q, tasks=tasks))
            emit(**ce.row(rows // tasks * tasks, tasks=tasks))
            if len(reads) > 3:
                emit(**reads[3].row(rows, queues=q, tasks=q))
            per_round = [p / s for p, s in zip(pq.seconds, st.seconds)]
            best_ratio = min(pq.seconds) / min(st.seconds)
            emit(case="ratio", queues=q, tasks=tasks, strata_over_parquet=round(best_ratio, 3),
                 target=0.8, met=best_ratio >= 0.8,
                 strata_over_parquet_by_round=[round(x, 3) for x in per_round],
                 strata_over_parquet_median_round=round(statistics.median(per_round), 3),
                 strata_over_ceiling=round(min(ce.seconds) / min(st.seconds), 3),
                 ceiling_over_parquet=round(min(pq.seconds) / min(ce.seconds), 3),
                 cpu_s_parquet=round(statistics.median(pq.jvm), 2),
                 cpu_s_strata=round(statistics.median(st.jvm) + statistics.median(st.python),
                                    2),
                 cpu_s_ceiling=round(statistics.median(ce.jvm) + statistics.median(ce.python),
                                     2))
    finally:
        spark.stop()


def bench_jobs(store: Path, runs: int) -> None:
    from strata.spark.jobs import rebuild_index, verify

    mb = log_bytes(store) / 1e6
    rates: dict[tuple[str, str], float] = {}
    for master in ("local[1]", "local[2]"):
        spark = session(master)
        try:
            def run_verify():
                r = verify(spark, store)
                assert r.ok, r.problems[:3]
            jobs = [Runs("verify", run_verify),
                    Runs("rebuild-index", lambda: rebuild_index(spark, store))]
            interleaved(jobs, runs)
        finally:
            spark.stop()
        for job in jobs:
            sec = min(job.seconds)
            rates[(job.name, master)] = mb / sec
            emit(case="job", job=job.name, master=master, log_MB=round(mb, 1),
                 seconds=round(sec, 3), MBps=round(mb / sec, 1))
    for job in ("verify", "rebuild-index"):
        emit(case="job_scaling", job=job,
             local2_over_local1=round(rates[(job, "local[2]")] / rates[(job, "local[1]")], 3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--job-runs", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=4,
                    help="untimed rounds of every read before the timed ones")
    ap.add_argument("--queues", default="8,2", help="one store per queue count")
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--only", default="read,jobs")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    only = set(args.only.split(","))
    scratch = Path(tempfile.mkdtemp(prefix="strata-spark-bench-", dir=args.dir))
    try:
        import pyspark
        emit(case="env", python=platform.python_version(), pyspark=pyspark.__version__,
             cpus=os.cpu_count(), rows=args.rows, size=args.size, runs=args.runs,
             job_runs=args.job_runs, warmup=args.warmup, queues=args.queues,
             segment_mib=args.segment_mib,
             start_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        counts = [int(q) for q in args.queues.split(",")]
        stores = {}
        for q in counts if "read" in only else counts[:1]:
            stores[q] = scratch / f"store-{q}"
            secs = build_store(stores[q], args.rows, args.size, args.segment_mib, q)
            emit(case="build", what="store", queues=q, rows=args.rows, seconds=round(secs, 2),
                 log_MB=round(log_bytes(stores[q]) / 1e6, 1))
        if "read" in only:
            bench_read(stores, scratch / "parquet", args.rows, args.size, args.runs,
                       args.warmup)
        if "jobs" in only:
            bench_jobs(stores[counts[0]], args.job_runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
