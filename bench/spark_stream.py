"""Streaming-read benchmark: what a micro-batch of ``readStream.format("strata")`` costs; prints
JSON lines.

    python bench/spark_stream.py [--batches N] [--big-rows N] [--dir DIR]
                                 [--only idle|batches|big]

One JSON object per line, each with "bench": "spark_stream" and a "case":

* ``idle_poll``: the driver-side ``latestOffset`` of the strata stream reader when no new data
  has arrived (what every trigger of an idle query pays: open the store read-only, read each
  queue's bounds, close), median/p90 ms, for 8 and 128 queues. No Spark involved.
* ``strata_batches``: an AvailableNow query into the ``noop`` sink with
  ``maxOffsetsPerTrigger`` = rows_per_batch (1 and 1000) over ``--batches`` micro-batches: wall
  time per micro-batch and the median of Spark's own per-trigger durations (``durationMs`` of
  the query progress: latestOffset, queryPlanning, walCommit, addBatch, commitOffsets,
  triggerExecution).
* ``rate_batches``: the same for Spark's built-in ``rate-micro-batch`` source with the same
  rows per batch: the engine's own per-micro-batch floor on this machine, as a peer.
* ``big_batch``: one AvailableNow micro-batch of ``--big-rows`` 100-byte messages (8 queues)
  into ``noop`` (wall time from ``start()``, which includes starting the query, and Spark's
  durations of the micro-batch itself), against a batch read of the same rows into ``noop``.

Nothing is asserted about time. The scratch directory is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import strata

TOPIC = "StreamBench"


def emit(obj: dict) -> dict:
    print(json.dumps({"bench": "spark_stream", **obj}), flush=True)
    return obj


def small_config() -> strata.StoreConfig:
    return strata.StoreConfig(segment_size=64 << 20, prefault=False, consume_queue_units=300_000,
                              index_slots=100_000, index_entries=400_000)


def build_store(path: Path, queues: int, rows: int, size: int = 100) -> None:
    with strata.open(path, small_config()) as store:
        store.create_topic(TOPIC, queues=queues)
        body = bytes(size)
        for start in range(0, rows, 10_000):
            n = min(10_000, rows - start)
            store.put_batch([strata.Message(TOPIC, body) for _ in range(n)])
        assert store.wait_dispatched(timeout=120)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]


def idle_poll(root: Path, queues: int, calls: int = 50) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from strata.spark.options import parse_stream_read_options
    from strata.spark.schema import read_schema
    from strata.spark.stream_read import StrataStreamReader

    path = root / f"idle-{queues}"
    build_store(path, queues, queues * 100)
    options = parse_stream_read_options({"path": str(path), "subscribe": TOPIC})
    reader = StrataStreamReader(options, read_schema())
    start = reader.initialOffset()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        end = reader.latestOffset(start, ReadAllAvailable())
        times.append((time.perf_counter() - t) * 1000)
        assert end == start
    emit({"case": "idle_poll", "queues": queues, "calls": calls,
          "median_ms": round(statistics.median(times), 2), "p90_ms": round(pct(times, 0.9), 2)})


DURATIONS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
             "triggerExecution")


def progress_medians(progress: list) -> dict:
    out = {}
    for name in DURATIONS:
        vals = [p["durationMs"][name] for p in progress if name in p["durationMs"]]
        if vals:
            out[name] = statistics.median(vals)
    return out


def run_to_end(writer) -> tuple[float, list]:
    """Start an availableNow query, wait for it; (wall seconds, progress of batches with rows)."""
    t = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    wall = time.perf_counter() - t
    return wall, [p for p in query.recentProgress if p["numInputRows"] > 0]


def strata_batches(spark, root: Path, rows_per_batch: int, batches: int, *,
                   case: str = "strata_batches") -> None:
    path = root / f"small-{rows_per_batch}"
    build_store(path, 4, rows_per_batch * batches)
    q = (spark.readStream.format("strata").option("path", str(path)).option("subscribe", TOPIC)
         .option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", str(rows_per_batch)).load()
         .writeStream.format("noop")
         .option("checkpointLocation", str(root / f"ck-{rows_per_batch}"))
         .trigger(availableNow=True))
    wall, prog = run_to_end(q)
    assert sum(p["numInputRows"] for p in prog) == rows_per_batch * batches
    emit({"case": case, "rows_per_batch": rows_per_batch, "batches": len(prog),
          "wall_ms_per_batch": round(wall * 1000 / len(prog), 1),
          "median_ms": progress_medians(prog)})


def rate_batches(spark, root: Path, rows_per_batch: int, batches: int) -> None:
    query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
             .load().writeStream.format("noop")
             .option("checkpointLocation", str(root / f"ck-rate-{rows_per_batch}")).start())
    t = time.perf_counter()
    try:
        while True:
            lp = query.lastProgress
            if lp is not None and lp["batchId"] >= batches:
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t
        prog = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    emit({"case": "rate_batches", "rows_per_batch": rows_per_batch, "batches": len(prog),
          "wall_ms_per_batch": round(wall * 1000 / max(1, len(prog)), 1),
          "median_ms": progress_medians(prog)})


def big_batch(spark, root: Path, rows: int) -> None:
    path = root / "big"
    build_store(path, 8, rows)
    q = (spark.readStream.format("strata").option("path", str(path)).option("subscribe", TOPIC)
         .option("startingOffsets", "earliest").load()
         .writeStream.format("noop").option("checkpointLocation", str(root / "ck-big"))
         .trigger(availableNow=True))
    stream_s, prog = run_to_end(q)
    assert sum(p["numInputRows"] for p in prog) == rows
    t = time.perf_counter()
    (spark.read.format("strata").option("path", str(path)).option("subscribe", TOPIC).load()
     .write.format("noop").mode("overwrite").save())
    batch_s = time.perf_counter() - t
    emit({"case": "big_batch", "rows": rows, "body_bytes": 100,
          "stream_s": round(stream_s, 2), "stream_rows_per_s": round(rows / stream_s),
          "stream_batch_ms": progress_medians(prog),
          "batch_read_s": round(batch_s, 2), "batch_rows_per_s": round(rows / batch_s)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--big-rows", type=int, default=500_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--only", choices=("idle", "batches", "big"), default=None)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="strata-spark-stream-", dir=args.dir))
    try:
        if args.only in (None, "idle"):
            for queues in (8, 128):
                idle_poll(root, queues)
        if args.only == "idle":
            return

        from strata.spark.jobs import spark_session
        spark = spark_session("local[2]", "strata-bench-stream")
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        try:
            # warm-up: the first Python data-source query spawns its workers
            (root / "warm").mkdir()
            strata_batches(spark, root / "warm", 10, 2, case="warmup")
            if args.only in (None, "batches"):
                for rows_per_batch in (1, 1000):
                    strata_batches(spark, root, rows_per_batch, args.batches)
                    rate_batches(spark, root, rows_per_batch, args.batches)
            if args.only in (None, "big"):
                big_batch(spark, root, args.big_rows)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
