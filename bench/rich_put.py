"""Rich messages against plain ones: ``put_batch`` rates of the same bodies side by side; prints
JSON lines.

    python bench/rich_put.py [--batches B] [--batch 1024] [--body 100] [--rounds R] [--dir D]
                             [--cases plain,rich,...] [--stages [--dispatch-each]]

Cases (each round runs all of them in a rotating order, each on its own topic of one store
per round; 8 queues; async flush; the dispatch pipeline runs in the background as usual):

* ``plain``: ``Message(topic, body)``.
* ``rich``: one or two keys, a tag, two or three properties and a born timestamp.
* ``rich_shard``: ``rich`` plus a shard key (the queue picked by its hash).
* ``columns``: the ``rich`` values through ``put_columns`` (round-robin), as Python
  sequences (keys as lists of str, properties as dicts).
* ``columns_pre``: ``put_columns`` with BytesColumns: one key per message and
  pre-encoded properties, as the Kafka listener hands them over.
* ``demo``: messages shaped as ``strata demo``'s: four topics in every batch (round-robin
  over them), two keys, a tag, three properties and a shard key each, born now (run it with
  ``--batch 512`` for the demo's batches).

``--stages``: instead, the CPU of each stage per message (``time.thread_time``, best of
``--rounds``, fresh messages per batch): ``prepare`` (validation and encoding, before the put
lock), ``write`` (queue choice and append under it) and ``dispatch`` (the dispatch thread's
work — consume queues, key index — held back during the puts and run on the caller with
``catch_up``, so that its CPU is counted too; all at the end, in the reader's largest batches,
or with ``--dispatch-each`` after every put, in the put's batch as the dispatch thread sees it
when it keeps up).

Messages are built before the clock starts (not counted). ``msgs_s`` is the rate of the put
calls alone; ``with_dispatch_msgs_s`` also waits until queues and key index have the batch
(``wait_dispatched``). Each case's best round and its ratio to ``plain``'s best round of the
same run (and ``cpu_vs_plain``: plain's process CPU seconds ÷ the case's, for the same number
of messages, steadier than wall rates on a shared machine); the goal is rich ÷ plain ≥ 0.5
(reported, never asserted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import strata  # noqa: E402
from strata.format import record as rec  # noqa: E402
from scratch import scratch_dir  # noqa: E402

CASES = ("plain", "rich", "rich_shard", "columns", "columns_pre", "demo")
MESSAGE_CASES = ("plain", "rich", "rich_shard", "demo")   # put_batch (the others: put_columns)
DEMO_TOPICS = ("orders", "payments", "shipments", "audit")


def fields(i: int) -> dict:
    keys = [f"order-{i}"] + ([f"user-{i % 977}"] if i % 2 else [])
    props = {"source": "bench", "region": ("eu", "us", "ap")[i % 3]}
    if i % 3:
        props["trace"] = f"{i:016x}"
    return dict(keys=keys, tags=("created", "paid", "shipped")[i % 3], properties=props,
                born_timestamp=1_700_000_000_000 + i)


def build(case: str, topic: str, bodies: list[bytes], first: int):
    n = len(bodies)
    if case == "plain":
        return [strata.Message(topic, b) for b in bodies]
    if case == "demo":   # as strata.cli.demo's _workload, bodies aside
        msgs = []
        for i, b in enumerate(bodies, first):
            name = DEMO_TOPICS[i % 4]
            entity = f"{name[:3]}-{i // 3}"
            msgs.append(strata.Message(f"demo_{name}", b, keys=[entity, f"seq-{i}"],
                                       tags=("created", "paid", "shipped")[i % 3],
                                       properties={"region": ("eu", "us", "ap")[i % 3],
                                                   "seq": str(i), "crc": str(i * 7919 % 10007)},
                                       shard_key=entity, born_timestamp=1_700_000_000_000 + i))
        return msgs
    fs = [fields(first + i) for i in range(n)]
    if case in ("rich", "rich_shard"):
        return [strata.Message(topic, b, shard_key=f"user-{(first + i) % 977}"
                               if case == "rich_shard" else None, **f)
                for i, (b, f) in enumerate(zip(bodies, fs))]
    if case == "columns":
        return dict(bodies=bodies, keys=[f["keys"] for f in fs], tags=[f["tags"] for f in fs],
                    properties=[f["properties"] for f in fs],
                    born_timestamps=[f["born_timestamp"] for f in fs])
    from strata.format.columns import BytesColumn   # (a tree before put_columns has none)
    return dict(bodies=BytesColumn.of(bodies), keys=BytesColumn.of([f["keys"][0] for f in fs]),
                tags=BytesColumn.of([f["tags"] for f in fs]),
                properties=BytesColumn.of([rec.encode_properties(None, None, f["properties"])
                                           for f in fs]),
                born_timestamps=np.array([f["born_timestamp"] for f in fs], np.int64))


def run_case(store, case: str, batches: int, batch: int, body: int) -> dict:
    topic = case
    for t in ([f"demo_{name}" for name in DEMO_TOPICS] if case == "demo" else [topic]):
        store.create_topic(t, queues=8)
    work = [build(case, topic, [bytes([65 + (j + i) % 26]) * body for j in range(batch)],
                  i * batch) for i in range(batches + 1)]
    put = (lambda w: store.put_batch(w)) if case in MESSAGE_CASES else \
        (lambda w: store.put_columns(topic, None, **w))
    put(work[0])  # warm-up (compiled code, segment)
    store.wait_dispatched(60)
    t0 = time.perf_counter()
    c0 = time.process_time()
    for w in work[1:]:
        put(w)
    t1 = time.perf_counter()
    store.wait_dispatched(120)
    t2 = time.perf_counter()
    n = batches * batch
    return {"msgs_s": round(n / (t1 - t0)), "with_dispatch_msgs_s": round(n / (t2 - t0)),
            "cpu_s": round(time.process_time() - c0, 3)}


def run_stages(store, case: str, batches: int, batch: int, body: int,
               each: bool = False) -> dict:
    """µs of thread CPU per message of each stage of ``put_batch`` (see the docstring)."""
    from strata.store import put_path
    for t in ([f"demo_{name}" for name in DEMO_TOPICS] if case == "demo" else [case]):
        store.create_topic(t, queues=8)
    work = [build(case, case, [bytes([65 + (j + i) % 26]) * body for j in range(batch)],
                  i * batch) for i in range(batches + 1)]
    store.put_batch(work[0])   # warm-up (compiled code, segment)
    store.wait_dispatched(60)
    store._reput.stop()        # dispatch held back: run below, on this thread
    prep = write = disp = 0.0
    for w in work[1:]:
        c0 = time.thread_time()
        prepared = store._encoder.prepare(w)
        c1 = time.thread_time()
        put_path.put_prepared(store, prepared, w)
        c2 = time.thread_time()
        prep, write = prep + c1 - c0, write + c2 - c1
        if each:   # dispatched batch by batch, as the dispatch thread does when it keeps up
            store._reput.catch_up()
            disp += time.thread_time() - c2
    c0 = time.thread_time()
    store._reput.catch_up()
    n = batches * batch / 1e6
    return {"prepare_us": prep / n, "write_us": write / n,
            "dispatch_us": (disp + time.thread_time() - c0) / n}


def stages(a, cases: list[str], scratch: Path) -> None:
    best: dict[str, dict] = {}
    for r in range(a.rounds):
        for case in cases:
            cfg = strata.StoreConfig(segment_size=256 << 20, flush="async")
            with strata.open(scratch / f"s{r}{case}", cfg) as store:
                row = run_stages(store, case, a.batches, a.batch, a.body, a.dispatch_each)
            old = best.setdefault(case, row)
            for k, v in row.items():
                old[k] = min(old[k], v)
    plain = best.get("plain")
    for case, row in best.items():
        out = {"bench": "rich_put", "case": f"stages_{case}",
               **{k: round(v, 3) for k, v in row.items()},
               "total_us": round(sum(row.values()), 3)}
        if plain and case != "plain":
            out["cpu_vs_plain"] = round(sum(plain.values()) / sum(row.values()), 3)
        print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=48)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--dir")
    ap.add_argument("--stages", action="store_true", help="CPU per stage (see the docstring)")
    ap.add_argument("--dispatch-each", action="store_true",
                    help="--stages: dispatch after every put (the dispatch thread's batches)")
    a = ap.parse_args()
    cases = a.cases.split(",")
    scratch, cleanup = scratch_dir("rich_put", a.dir)
    best: dict[str, dict] = {}
    if a.stages:
        try:
            return stages(a, cases, scratch)
        finally:
            cleanup()
    try:
        for r in range(a.rounds):
            cfg = strata.StoreConfig(segment_size=256 << 20, flush="async")
            with strata.open(scratch / f"r{r}", cfg) as store:
                order = cases[r % len(cases):] + cases[:r % len(cases)]
                for case in order:
                    row = run_case(store, case, a.batches, a.batch, a.body)
                    print(json.dumps({"bench": "rich_put", "case": case, "round": r,
                                      "batch": a.batch, "body": a.body, **row}), flush=True)
                    if case not in best or row["msgs_s"] > best[case]["msgs_s"]:
                        best[case] = row
        base = best.get("plain")
        for case, row in best.items():
            out = {"bench": "rich_put", "case": f"best_{case}", **row}
            if base and case != "plain":
                out["vs_plain"] = round(row["msgs_s"] / base["msgs_s"], 3)
                # on a shared, loaded machine the process CPU per message is steadier
                out["cpu_vs_plain"] = round(base["cpu_s"] / row["cpu_s"], 3)
                out["with_dispatch_vs_plain"] = round(
                    row["with_dispatch_msgs_s"] / base["with_dispatch_msgs_s"], 3)
                if case.startswith("rich") or case == "demo":
                    out["goal"] = 0.5
                    out["met"] = out["vs_plain"] >= 0.5
            print(json.dumps(out), flush=True)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
