"""A/B of the store's hot paths between this tree and another (e.g. ``main``), run side by
side in the same run: each measurement runs in a child process whose ``PYTHONPATH`` is one
tree's ``src``, the trees interleaved round by round (their order swapped every round) so a
slow spell of the shared machine hits both alike.

    git worktree add --detach /tmp/ab-main main
    .venv/bin/python bench/ab_store.py --other /tmp/ab-main [--rounds 5] [--messages 200000]
                                       [--spark-rows 200000] [--spark-rounds 2]

Parts (seconds, lower is better): ``append`` (put_batch of 100-message batches, 8 queues,
100-byte bodies), ``get`` (every message read back by get, 32 at a time), ``scan`` (the whole
log), ``recovery`` (open after a crash: the store abandoned with its abort marker, so the open
recovers from the checkpoint and re-dispatches), ``spark`` (``spark.read.format("strata")``
of the store into Spark's noop sink on local[2], one session per tree and round, after a
warm-up read). A first child per tree, not counted, lets numba compile each tree's kernels.

One JSON object per line: ``{"bench": "ab_store", "part", "tree", "round", "seconds"}`` per
measurement, then per part ``{"part", "this_median_s", "other_median_s", "ratio"}`` with
ratio = this ÷ other (above 1: this tree is slower).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def child_store(directory: Path, messages: int) -> dict:
    import strata
    cfg = strata.StoreConfig(segment_size=64 << 20, default_queues=8)
    body = os.urandom(100)
    out = {}
    with strata.open(directory, cfg) as store:
        store.create_topic("ab", 8)
        t = time.perf_counter()
        for i in range(0, messages, 100):
            store.put_batch([strata.Message("ab", body, keys=[f"k{i + j}"])
                             for j in range(100)])
        store.wait_dispatched()
        out["append"] = time.perf_counter() - t
        t = time.perf_counter()
        n = 0
        for q in range(8):
            off, mx = 0, store.max_offset("ab", q)
            while off < mx:
                r = store.get("ab", q, off, 32)
                n += len(r.messages)
                off = r.next_offset
        out["get"] = time.perf_counter() - t
        assert n == messages, n
        t = time.perf_counter()
        n = sum(1 for _ in store.scan(0))
        out["scan"] = time.perf_counter() - t
        assert n == messages, n
        store._abandon()
    t = time.perf_counter()
    with strata.open(directory, cfg) as store:
        assert store.max_offset("ab", 0) > 0
    out["recovery"] = time.perf_counter() - t
    return out


def child_spark(directory: Path, rows: int) -> dict:
    import strata
    from strata.spark.jobs import spark_session
    with strata.open(directory, strata.StoreConfig(default_queues=8)) as store:
        store.create_topic("sp", 8)
        body = os.urandom(100)
        for i in range(0, rows, 1000):
            store.put_batch([strata.Message("sp", body) for _ in range(1000)])
    spark = spark_session("local[2]", "strata-ab")
    try:
        read = lambda: spark.read.format("strata").option("path", str(directory)) \
            .option("subscribe", "sp").load().write.format("noop").mode("overwrite").save()
        read()   # warm-up: the JVM and the Python workers
        t = time.perf_counter()
        read()
        return {"spark": time.perf_counter() - t}
    finally:
        spark.stop()


def run_child(tree: Path, part: str, size: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    with tempfile.TemporaryDirectory(prefix="ab-store-") as d:
        out = subprocess.run([sys.executable, __file__, "--child", part, "--size", str(size),
                              "--dir", str(Path(d) / "s")], env=env, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", type=Path, default=Path("/tmp/ab-main"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--spark-rows", type=int, default=200_000)
    ap.add_argument("--spark-rounds", type=int, default=2)
    ap.add_argument("--child", choices=("store", "spark"))
    ap.add_argument("--size", type=int)
    ap.add_argument("--dir", type=Path)
    a = ap.parse_args()
    if a.child:
        fn = child_store if a.child == "store" else child_spark
        print(json.dumps(fn(a.dir, a.size)))
        return
    trees = {"this": HERE, "other": a.other.resolve()}
    got: dict[tuple[str, str], list[float]] = {}
    plan = [("store", a.messages, a.rounds), ("spark", a.spark_rows, a.spark_rounds)]
    for name in trees:   # not counted: numba compiles (and caches) each tree's kernels
        run_child(trees[name], "store", 1000)
    for kind, size, rounds in plan:
        for r in range(rounds):
            order = ["this", "other"] if r % 2 == 0 else ["other", "this"]
            for name in order:
                for part, secs in run_child(trees[name], kind, size).items():
                    got.setdefault((part, name), []).append(secs)
                    print(json.dumps({"bench": "ab_store", "part": part, "tree": name,
                                      "round": r, "seconds": round(secs, 4)}), flush=True)
    for part in dict.fromkeys(p for p, _ in got):
        this, other = (statistics.median(got[(part, n)]) for n in ("this", "other"))
        print(json.dumps({"bench": "ab_store", "part": part, "this_median_s": round(this, 4),
                          "other_median_s": round(other, 4),
                          "ratio": round(this / other, 3)}), flush=True)


if __name__ == "__main__":
    main()
