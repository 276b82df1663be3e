"""The main job behind ``make run``: a realistic workload appended, read back and verified."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from strata.format.columns import load_kernels
from strata.store.config import StoreConfig
from strata.store.message import GetStatus, Message
import strata

TOPICS = {"orders": ("created", "paid", "cancelled"),
          "payments": ("authorized", "captured", "refunded"),
          "shipments": ("packed", "shipped", "delivered"),
          "audit": ("login", "logout", "change")}
REGIONS = ("eu-west", "us-east", "ap-south")
PLAIN_TOPIC = "plain"   # the same bodies again as topic + body only: the batch path's rate


def _body(run: int, seq: int, topic: str, rng: random.Random) -> bytes:
    pad = rng.randbytes(rng.randint(40, 400)).hex()
    return (f'{{"run":{run},"seq":{seq},"topic":"{topic}","amount":{seq % 997},'
            f'"note":"{pad}"}}').encode()


def _workload(run: int, n: int, seed: int):
    """Messages built one by one, as an application makes them, each born now."""
    rng = random.Random(seed)
    names = list(TOPICS)
    for seq in range(n):
        topic = names[seq % len(names)]
        tag = TOPICS[topic][seq % 3]
        entity = f"{topic[:3]}-{run}-{seq // 3}"
        yield Message(topic, _body(run, seq, topic, rng), keys=[entity, f"seq-{run}-{seq}"],
                      tags=tag, properties={"region": REGIONS[seq % 3], "seq": str(seq),
                                            "crc": str(seq * 7919 % 10007)},
                      shard_key=entity, born_timestamp=time.time_ns() // 1_000_000)


def _append(store, msgs: list[Message], batch: int, progress: Progress) -> tuple[float, list]:
    """``msgs`` put ``batch`` at a time; (seconds taken, results). The rich and the plain
    messages are appended by this same loop, so their two rates compare like with like."""
    results: list = []
    with progress:
        task = progress.add_task("appending", total=len(msgs))
        t0 = time.perf_counter()
        for i in range(0, len(msgs), batch):
            results.extend(store.put_batch(msgs[i:i + batch]))
            progress.update(task, advance=min(batch, len(msgs) - i))
        took = time.perf_counter() - t0
    return took, results


def run_demo(directory: str, n: int, batch: int, console: Console, *, spark: bool = True,
             config: StoreConfig | None = None) -> bool:
    """Run the main job on ``directory``; True if every check passed. ``config`` (tests) is
    the store's config; by default the store's own geometry and default settings."""
    cfg = config or StoreConfig()
    run = int(time.time())
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=True)
    with strata.open(directory, config) as store:
        if store.recovery_report is not None:
            console.print(f"[dim]{store.recovery_report.summary()}[/dim]")
        start = {(t, q): store.max_offset(t, q)
                 for t in TOPICS for q in range(store.queue_count(t) or cfg.default_queues)}
        # 1. append
        t_build = time.perf_counter()
        msgs = []
        with progress:       # building 200,000 rich messages takes a while: show it
            task = progress.add_task("building messages", total=n)
            for m in _workload(run, n, seed=run):
                msgs.append(m)
                if len(msgs) % 4096 == 0:
                    progress.update(task, completed=len(msgs))
        t_build = time.perf_counter() - t_build
        payload = sum(len(m.body) for m in msgs)
        load_kernels()   # numba's cached column encoders: a one-time cost, not the rate's
        t0 = time.perf_counter()
        t_put, results = _append(store, msgs, batch, progress)
        assert all(r.ok for r in results)
        store.wait_dispatched()
        t_disp = time.perf_counter() - t0
        # 2. consume every queue from where this run started
        expected = {(r.topic, r.queue_id, r.queue_offset): i for i, r in enumerate(results)}
        t1 = time.perf_counter()
        seen = 0
        bad = 0
        tag_counts: Counter = Counter()      # per (topic, tag), as the store's get() returns them
        with progress:
            task = progress.add_task("consuming", total=n)
            for (topic, q), off in start.items():
                while True:
                    got = store.get(topic, q, off, 1024)
                    if got.status is not GetStatus.FOUND:
                        break
                    for m in got.messages:
                        i = expected.get((m.topic, m.queue_id, m.queue_offset))
                        if i is None or m.body != msgs[i].body or m.tags != msgs[i].tags \
                                or list(m.keys) != list(msgs[i].keys) \
                                or m.properties != msgs[i].properties:
                            bad += 1
                        seen += 1
                        tag_counts[(m.topic, m.tags)] += 1
                    progress.update(task, advance=len(got.messages))
                    off = got.next_offset
        t_get = time.perf_counter() - t1
        end = {k: store.max_offset(*k) for k in start}
        # 3. by id, by key, by time, by tag
        rng = random.Random(run)
        sample = rng.sample(range(n), min(1000, n))
        t2 = time.perf_counter()
        by_id = sum(1 for i in sample if store.get_by_id(results[i].msg_id) is not None
                    and store.get_by_id(results[i].msg_id).body == msgs[i].body)
        t_id = time.perf_counter() - t2
        t3 = time.perf_counter()
        key_ok = 0
        for i in sample[:200]:
            m = msgs[i]
            found = store.query(m.topic, m.keys[1])
            key_ok += len(found) == 1 and found[0].body == m.body
        t_key = time.perf_counter() - t3
        mid = results[n // 2]
        at = store.offset_for_time(mid.topic, mid.queue_id, mid.store_timestamp)
        first_at_time = store.get(mid.topic, mid.queue_id, at, 1).messages[0]
        time_ok = first_at_time.store_timestamp >= mid.store_timestamp and \
            at <= mid.queue_offset
        tagged = store.get("orders", 0, start[("orders", 0)], 1024, tags="paid")
        tag_ok = all(m.tags == "paid" for m in tagged.messages)
        # 4. full verification of this run's records
        t4 = time.perf_counter()
        verified = sum(1 for _ in store.scan(results[0].commitlog_offset, verify_crc=True))
        t_verify = time.perf_counter() - t4
        # 5. the same bodies as plain messages (topic + body), timed as the rich ones were
        plain = [Message(PLAIN_TOPIC, m.body) for m in msgs]
        t_plain, plain_results = _append(store, plain, batch, progress)
        plain_ok = all(r.ok for r in plain_results)

    ok = (bad == 0 and seen == n and by_id == len(sample) and key_ok == min(200, len(sample))
          and time_ok and tag_ok and verified >= n and plain_ok)
    t = Table(title=f"strata main job on {directory}", show_header=True)
    t.add_column("step")
    t.add_column("result")
    t.add_column("rate", justify="right")
    t.add_row("append, rich messages",
              f"{n:,} ({payload / 1e6:.1f} MB of bodies), 4 topics x 8 queues, batches of {batch}",
              f"{n / t_put:,.0f} msg/s, {payload / t_put / 1e6:.1f} MB/s")
    t.add_row("dispatch", "consume queues + key index built", f"done {t_disp:.2f}s after start")
    t.add_row("consume (get, 1024/batch)", f"{seen:,} read, {bad} mismatched", f"{seen / t_get:,.0f} msg/s")
    t.add_row("lookup by msg id", f"{by_id}/{len(sample)} found and equal", f"{len(sample) / t_id:,.0f}/s")
    t.add_row("query by key", f"{key_ok}/{min(200, len(sample))} exact", f"{min(200, len(sample)) / t_key:,.0f}/s")
    t.add_row("offset for time", f"queue {mid.topic}/{mid.queue_id} @ {mid.store_timestamp} -> offset {at}",
              "ok" if time_ok else "WRONG")
    t.add_row("tag filter", f"orders/0 tag 'paid': {len(tagged.messages)} messages", "ok" if tag_ok else "WRONG")
    t.add_row("verify (CRC)", f"{verified:,} records", f"{verified / t_verify:,.0f} rec/s")
    ratio = t_plain / t_put
    t.add_row("append, plain messages", f"the same bodies, topic + body only (topic "
              f"'{PLAIN_TOPIC}'); rich ÷ plain rate: {ratio:.2f} (goal >= 0.5: "
              f"{'met' if ratio >= 0.5 else 'NOT met'} in this run)",
              f"{n / t_plain:,.0f} msg/s, {payload / t_plain / 1e6:.1f} MB/s")
    console.print(t)
    console.print(f"[dim]Rich messages (2 keys, a tag, 3 properties and a shard key each; built one "
                  f"by one beforehand at {n / t_build:,.0f} msg/s, not counted) take put_batch's "
                  f"column-by-column batch path as plain ones do: read in one compiled walk "
                  f"over the message objects, their keys, tags and properties encoded and "
                  f"their keys indexed a batch at a time in compiled code. The plain messages "
                  f"give no born time: each is born at its put (its store time).[/dim]")
    if spark:
        ok = spark_step(directory, start, end, tag_counts, console) and ok
    console.print("[green]all checks passed[/green]" if ok else "[red]CHECKS FAILED[/red]")
    return ok


def export_path(directory: str) -> Path:
    """Where the demo exports its Parquet table: ``<DIR>-parquet/`` beside the store."""
    p = Path(directory).resolve()
    return p.parent / f"{p.name}-parquet"


def spark_step(directory: str, start: dict, end: dict, store_counts: Counter,
               console: Console) -> bool:
    """Read this run's messages through ``spark.read.format("strata")``, count them per topic
    and tag, compare with the store's own counts, and export the orders topic to Parquet.

    Spark needs Java: without it this says what to install and fails the job (the quick start
    promises the Spark step, so a missing Java is an error, not a silent skip).
    """
    try:
        from strata.spark import JavaNotFoundError
        from strata.spark.jobs import export_topic, spark_session
    except ImportError as exc:
        console.print(f"Spark step failed: PySpark is not installed ({exc}); install strata "
                      "with the spark extra: pip install -e '.[spark]' in the strata checkout",
                      style="red", markup=False)
        return False
    t0 = time.perf_counter()
    with console.status("Spark: starting a local session"):
        try:
            spark = spark_session("local[*]", "strata-demo")
        except JavaNotFoundError as exc:
            console.print(f"[red]Spark step failed: {exc}[/red]")
            return False
    try:
        t_start = time.perf_counter() - t0
        per_topic: dict[str, dict[str, int]] = {}
        for (t, q), off in start.items():
            per_topic.setdefault(t, {})[str(q)] = off
        ending: dict[str, dict[str, int]] = {}
        for (t, q), off in end.items():
            ending.setdefault(t, {})[str(q)] = off
        t1 = time.perf_counter()
        with console.status("Spark: counting messages per topic and tag"):
            df = (spark.read.format("strata").schema("topic string, tags string")  # decode only these
                  .option("path", str(directory))
                  .option("subscribe", ",".join(sorted(per_topic)))
                  .option("startingOffsets", json.dumps(per_topic, sort_keys=True))
                  .option("endingOffsets", json.dumps(ending, sort_keys=True))
                  .option("includeMetadata", "true").load())
            rows = df.groupBy("topic", "tags").count().collect()
        t_count = time.perf_counter() - t1
        spark_counts = Counter({(r["topic"], r["tags"]): r["count"] for r in rows})
        counts_ok = spark_counts == store_counts
        out = export_path(directory) / "orders"
        t2 = time.perf_counter()
        with console.status(f"Spark: exporting topic orders to {out}"):
            exported = export_topic(spark, directory, "orders", out, mode="overwrite")
        t_export = time.perf_counter() - t2
    finally:
        spark.stop()
    t = Table(title="Spark step (spark.read.format(\"strata\"))", show_header=True)
    t.add_column("topic")
    t.add_column("tag")
    t.add_column("spark count", justify="right")
    t.add_column("store count", justify="right")
    for key in sorted(set(spark_counts) | set(store_counts)):
        mark = "" if spark_counts[key] == store_counts[key] else " [red]MISMATCH[/red]"
        t.add_row(key[0], str(key[1]), f"{spark_counts[key]:,}", f"{store_counts[key]:,}{mark}")
    console.print(t)
    console.print(f"Spark: session started in {t_start:.1f}s; {sum(spark_counts.values()):,} "
                  f"messages counted per topic/tag in {t_count:.1f}s "
                  f"({'equal to' if counts_ok else '[red]DIFFERENT from[/red]'} the store's "
                  f"counts); topic orders exported to {out} ({exported.rows:,} rows, "
                  f"{exported.dates} date partition(s)) in {t_export:.1f}s")
    return counts_ok and exported.rows > 0
