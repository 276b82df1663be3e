"""Key query benchmark: ``store.query(topic, key)`` latency at 1 M and 10 M keys, with SQLite's
indexed lookup on the same keys in the same run; prints JSON lines.

    python bench/key_query.py [--keys N] [--first N] [--queries Q] [--chunks C] [--no-sqlite]
                              [--ab OTHER_SRC] [--ab-messages N] [--ab-rounds R] [--dir DIR]

* ``build``: one store grows to ``--keys`` messages (default 10,000,000) of 100 B bodies, each
  with its own key ``k%08d``, through ``put_columns`` in batches of 8,192 (8 queues, round
  robin), the dispatch drained, then flushed; a SQLite table ``(id INTEGER PRIMARY KEY, key
  TEXT, body BLOB)`` with an index on ``key`` gets the same rows (``executemany`` of 8,192
  per transaction; no journal, no fsync: only its lookups are measured).
* ``sync``: ``os.sync()`` after each build, so that its writeback is not measured.
* ``query``: at ``--first`` keys (default 1,000,000, measured while the store is that big) and
  at ``--keys``: ``--queries`` random present keys (default 20,000) for each of strata's
  ``query`` (each answer must be exactly its message), the same with ``gc.freeze()`` done
  first (``strata_gc_frozen``) and SQLite's ``SELECT id, body FROM msgs WHERE key = ?``
  (``fetchall``), one call at a time, timed call by call, in ``--chunks`` rounds (default 10)
  that run the three in turn (their order rotating) so all see the same machine load. p50 /
  p99 / p99.9 / max in µs, sqlite ÷ strata, the garbage collections that ran during strata's
  queries (per generation), the page faults (major: read from disk) and involuntary context
  switches (preemptions) during them; then ``scaling``: the big size ÷ the small size.
* ``ab_put_keys`` (with ``--ab OTHER_SRC``): put_batch of 1,024 messages with one key each
  (``--ab-messages``, default 200,000) until the dispatch has indexed them, in a child
  process per tree (this tree and ``OTHER_SRC``, e.g. ``git archive 501d160 src``), ABBA
  for ``--ab-rounds`` rounds (default 2); seconds per tree and the ratio this ÷ other.

Nothing is asserted about time. The scratch directory is deleted at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scratch import scratch_dir  # noqa: E402

TOPIC = "KeyQuery"
BATCH = 8192
BODY = 100


def emit(obj: dict) -> dict:
    print(json.dumps(obj), flush=True)
    return obj


def key_column(start: int, n: int):
    """Keys ``k%08d`` of ``start .. start + n - 1`` as one buffer of 9-byte items (numpy)."""
    i = np.arange(start, start + n, dtype=np.int64)
    buf = np.empty((n, 9), np.uint8)
    buf[:, 0] = ord("k")
    for d in range(8):
        buf[:, 8 - d] = 48 + (i // 10 ** d) % 10
    return buf.reshape(-1)


def grow(store, db: sqlite3.Connection | None, start: int, stop: int, bodies: np.ndarray
         ) -> dict:
    from strata.format.columns import BytesColumn
    body_off = np.arange(BATCH + 1, dtype=np.int64) * BODY
    key_off = np.arange(BATCH + 1, dtype=np.int64) * 9
    body_items = [bodies[r * BODY:(r + 1) * BODY].tobytes() for r in range(BATCH)]
    t_s = t_q = 0.0
    for j in range(start, stop, BATCH):
        m = min(BATCH, stop - j)
        keys = key_column(j, m)
        t = time.perf_counter()
        store.put_columns(TOPIC, None, BytesColumn(bodies, body_off[:m + 1]),
                          keys=BytesColumn(keys, key_off[:m + 1]))
        t_s += time.perf_counter() - t
        if db is not None:
            t = time.perf_counter()
            rows = [(f"k{j + r:08d}", body_items[r]) for r in range(m)]
            db.execute("BEGIN")
            db.executemany("INSERT INTO msgs (key, body) VALUES (?, ?)", rows)
            db.execute("COMMIT")
            t_q += time.perf_counter() - t
    t = time.perf_counter()
    store.wait_dispatched(3600)
    store.flush()
    t_s += time.perf_counter() - t
    return {"strata_s": round(t_s, 1), "sqlite_s": round(t_q, 1)}


def pct(xs: list[float], q: float) -> float:
    return round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1e6, 1)


def stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"n": len(xs), "p50_us": pct(xs, 0.5), "p99_us": pct(xs, 0.99),
            "p999_us": pct(xs, 0.999), "max_us": round(xs[-1] * 1e6, 1)}


def query_phase(store, db, n_keys: int, queries: int, chunks: int) -> dict:
    """``queries`` random present keys for each side, in ``chunks`` rounds; each round runs
    strata, strata with ``gc.freeze()`` and SQLite in turn (their order rotating), on keys
    of its own."""
    rng = random.Random(n_keys)
    sides = ["strata", "strata_gc_frozen"] + (["sqlite"] if db is not None else [])
    keys = {side: [f"k{rng.randrange(n_keys):08d}" for _ in range(queries)] for side in sides}
    q = store.query
    ex = db.execute if db is not None else None
    sql = "SELECT id, body FROM msgs WHERE key = ?"
    pc = time.perf_counter
    for k in keys["strata"][:1000]:             # warm: compiled kernels, the first pages
        q(TOPIC, k)
    runs = [0, 0, 0]
    faults = [0, 0, 0]   # during strata's queries: major, minor page faults; preemptions

    def on_gc(phase, info):
        if phase == "start":
            runs[info["generation"]] += 1

    lat: dict[str, list[float]] = {side: [] for side in sides}
    wrong = 0
    step = max(1, queries // chunks)
    for c, start in enumerate(range(0, queries, step)):
        for side in sides[c % len(sides):] + sides[:c % len(sides)]:
            part = keys[side][start:start + step]
            out = lat[side]
            if side == "sqlite":
                for k in part:
                    t = pc()
                    rows = ex(sql, (k,)).fetchall()
                    out.append(pc() - t)
                    wrong += len(rows) != 1
                continue
            frozen = side == "strata_gc_frozen"
            if frozen:
                gc.freeze()
            gc.callbacks.append(on_gc)
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            for k in part:
                t = pc()
                r = q(TOPIC, k)
                out.append(pc() - t)
                # its key in the raw properties: no decoding (whose cache would keep objects)
                wrong += len(r) != 1 or k.encode() not in r[0].properties_raw
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            faults[0] += r1.ru_majflt - r0.ru_majflt
            faults[1] += r1.ru_minflt - r0.ru_minflt
            faults[2] += r1.ru_nivcsw - r0.ru_nivcsw
            gc.callbacks.remove(on_gc)
            if frozen:
                gc.unfreeze()
    res = {"bench": "key_query", "case": "query", "indexed_keys": n_keys,
           **{side: stats(xs) for side, xs in lat.items()},
           "gc_runs_during_strata_queries": runs,
           "during_strata_queries": {"major_faults": faults[0], "minor_faults": faults[1],
                                     "involuntary_switches": faults[2]},
           "wrong_results": wrong}
    if db is not None:
        res["sqlite_over_strata"] = {
            p: round(res["sqlite"][p] / res["strata"][p], 2) for p in ("p50_us", "p99_us")}
    return emit(res)


def open_sqlite(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=OFF")   # a peer for lookups: its build need not last
    db.execute("PRAGMA synchronous=OFF")
    db.execute("CREATE TABLE msgs (id INTEGER PRIMARY KEY, key TEXT, body BLOB)")
    db.execute("CREATE INDEX msgs_key ON msgs (key)")   # kept as rows come, as a queue's is
    return db


def main_query(a) -> None:
    import strata
    scratch, remove = scratch_dir("key_query", a.dir)
    emit({"bench": "key_query", "case": "env", "python": sys.version.split()[0],
          "strata_src": str(Path(strata.__file__).parents[1]), "cpus": os.cpu_count(),
          "keys": a.keys, "first": a.first, "queries": a.queries,
          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "load": os.getloadavg()})
    bodies = np.frombuffer(os.urandom(BODY * BATCH), np.uint8)
    try:
        store = strata.open(scratch / "store", strata.StoreConfig(segment_size=1 << 30))
        db = None if a.no_sqlite else open_sqlite(scratch / "sqlite.db")
        try:
            store.create_topic(TOPIC, 8)
            small = big = None
            size = 0
            for target in (a.first, a.keys):
                if target <= size:
                    continue
                built = grow(store, db, size, target, bodies)
                size = target
                emit({"bench": "key_query", "case": "build", "keys": size, **built,
                      "index_files": len(store.key_index.files())})
                t = time.perf_counter()
                os.sync()   # the builds' writeback done before the timing, not during it
                emit({"bench": "key_query", "case": "sync", "keys": size,
                      "seconds": round(time.perf_counter() - t, 2)})
                got = query_phase(store, db, size, a.queries, a.chunks)
                small, big = (got, None) if small is None else (small, got)
            if big is not None:
                emit({"bench": "key_query", "case": "scaling",
                      "keys": [a.first, a.keys],
                      **{f"{v}_{p}_big_over_small": round(big[v][p] / small[v][p], 2)
                         for v in ("strata", "strata_gc_frozen") for p in ("p50_us", "p99_us")}})
        finally:
            store.close()
            if db is not None:
                db.close()
    finally:
        remove()


# ------------------------------------------------------------------ A/B of keyed puts

def child_put(directory: Path, messages: int) -> None:
    import strata
    store = strata.open(directory, strata.StoreConfig(segment_size=256 << 20))
    store.create_topic(TOPIC, 8)
    body = os.urandom(BODY)
    batches = [[strata.Message(TOPIC, body, keys=(f"k{i:08d}",))
                for i in range(j, min(messages, j + 1024))]
               for j in range(0, messages, 1024)]
    t = time.perf_counter()
    for b in batches:
        store.put_batch(b)
    put_s = time.perf_counter() - t
    store.wait_dispatched(3600)
    total = time.perf_counter() - t
    store.close()
    print(json.dumps({"put_s": put_s, "indexed_s": total}))


def main_ab(a) -> None:
    this = HERE.parent / "src"
    trees = {"this": this, "other": Path(a.ab)}
    scratch, remove = scratch_dir("key_query_ab", a.dir)
    res: dict[str, list[dict]] = {"this": [], "other": []}
    try:
        order = ["this", "other", "other", "this"] * a.ab_rounds
        for i, tree in enumerate(["this", "other"] + order):   # first two: compile, not kept
            d = scratch / f"s{i}"
            env = dict(os.environ, PYTHONPATH=str(trees[tree]))
            p = subprocess.run([sys.executable, __file__, "--child", str(d),
                                "--ab-messages", str(a.ab_messages)], env=env, check=True,
                               capture_output=True, text=True)
            if i >= 2:
                r = json.loads(p.stdout.strip().splitlines()[-1])
                res[tree].append(r)
                emit({"bench": "key_query", "case": "ab_put_keys_round", "tree": tree,
                      "messages": a.ab_messages, **{k: round(v, 3) for k, v in r.items()}})
            subprocess.run(["rm", "-rf", str(d)], check=True)
        med = {t: {k: float(np.median([r[k] for r in rs])) for k in ("put_s", "indexed_s")}
               for t, rs in res.items()}
        emit({"bench": "key_query", "case": "ab_put_keys", "messages": a.ab_messages,
              "other": str(a.ab), "this_median": med["this"], "other_median": med["other"],
              "ratio_this_over_other": {k: round(med["this"][k] / med["other"][k], 3)
                                        for k in ("put_s", "indexed_s")}})
    finally:
        remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--first", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--ab", default=None, help="another tree's src: A/B of keyed put_batch")
    ap.add_argument("--ab-messages", type=int, default=200_000)
    ap.add_argument("--ab-rounds", type=int, default=2)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help="scratch directory (default: new under /tmp)")
    a = ap.parse_args()
    if a.child:
        child_put(Path(a.child), a.ab_messages)
    elif a.ab:
        main_ab(a)
    else:
        main_query(a)


if __name__ == "__main__":
    main()
