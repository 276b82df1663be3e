"""Reads side by side by the reading thread's CPU time: SQLite's range read, ``get`` (counting,
and reading every body), ``scan`` reading every body and ``get_columns``; prints JSON lines.

    python bench/read_cpu.py [--msgs N] [--rounds R] [--dir D] [--columns-batch 1000,4096]

``consume.py``'s peer rows time the same reads by the wall clock; on a shared machine with
many runnable processes the wall clock mostly measures the wait for a core, so this bench
counts ``time.thread_time()`` of the thread doing the reads (the store's background threads
are idle then: everything was dispatched before). One table / one queue of N messages of
100 B and of N / 5 of 1 KiB, 1000 messages per call, every case once a round (best round
kept); ``get_bodies`` reads the bodies alone (``GetResult.bodies()``: a bytes object each, no
message objects), for consumers that want only those (no goal of its own); ``vs_sqlite`` is the case's messages per CPU second over SQLite's. Targets (issue 27):
``get`` reading every body ≥ 2.5×, ``scan`` reading every body ≥ 3×, ``get_columns`` ≥ 10×.

``--columns-batch`` (a comma list, default ``1000``): ``get_columns``' messages a call; the
goal does not fix a batch size and readers that want arrays read large ones. Each size
other than 1000 adds a ``get_columns`` row and a ``sqlite`` row with ``"batch"``: SQLite's
range read at the SAME count a call, in the same rounds, and the ratio between those two.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import strata  # noqa: E402
from scratch import scratch_dir  # noqa: E402

GOALS = {"get_body_read": 2.5, "scan_body_read": 3.0, "get_columns": 10.0}


def build(d: Path, n: int, size: int):
    c = sqlite3.connect(str(d / f"q{size}.db"), isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute("CREATE TABLE msgs(id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
    bodies = [bytes([65 + i % 26]) * size for i in range(1024)]
    for start in range(0, n, 1000):
        c.execute("BEGIN")
        c.executemany("INSERT INTO msgs(body) VALUES (?)",
                      [(bodies[i & 1023],) for i in range(start, min(n, start + 1000))])
        c.execute("COMMIT")
    s = strata.open(d / f"s{size}", strata.StoreConfig(segment_size=256 << 20, flush="async"))
    s.create_topic("t", queues=1)
    for start in range(0, n, 1000):
        s.put_batch([strata.Message("t", bodies[i & 1023])
                     for i in range(start, min(n, start + 1000))])
    assert s.wait_dispatched(600)
    return c, s


def sqlite_range(c, batch: int = 1000):
    """SQLite's range read of the whole table, ``batch`` rows a query."""
    def sqlite_read():
        q, last, got = f"SELECT id, body FROM msgs WHERE id > ? ORDER BY id LIMIT {batch}", 0, 0
        while True:
            rows = c.execute(q, (last,)).fetchall()
            if not rows:
                return got
            got += len(rows)
            last = rows[-1][0]
    return sqlite_read


def columns_read(s, n: int, batch: int = 1000):
    """``get_columns`` of the whole queue, ``batch`` messages a call."""
    def columns():
        off = got = 0
        while off < n:
            r = s.get_columns("t", 0, off, batch)
            got += r.batch.num_rows
            off = r.next_offset
        return got
    return columns


def cases(c, s, n: int) -> dict:
    def get(touch: bool):
        def run():
            off = got = 0
            while off < n:
                r = s.get("t", 0, off, 1000)
                got += len(r.messages)
                if touch:
                    for m in r.messages:
                        m.body
                off = r.next_offset
            return got
        return run

    def bodies():   # the bodies alone (GetResult.bodies): no message objects
        off = got = 0
        while off < n:
            r = s.get("t", 0, off, 1000)
            got += len(r.bodies())
            off = r.next_offset
        return got

    def scan_bodies():
        return sum(1 for m in s.scan(0) if m.body is not None)

    return {"sqlite": sqlite_range(c), "get_count": get(False), "get_body_read": get(True),
            "get_bodies": bodies, "scan_body_read": scan_bodies,
            "get_columns": columns_read(s, n)}


def stores(bench: str, msgs: int, where: str | None) -> Iterator[tuple]:
    """This bench's two data sets in turn, as (SQLite connection, store, messages, body
    size): ``msgs`` of 100 B, then ``msgs`` / 5 of 1 KiB; each closed when the caller asks
    for the next, the scratch directory (under ``where``) removed at the end."""
    scratch, cleanup = scratch_dir(bench, where)
    try:
        for n, size in ((msgs, 100), (max(1, msgs // 5), 1024)):
            c, s = build(scratch, n, size)
            try:
                yield c, s, n, size
            finally:
                s.close()
                c.close()
    finally:
        cleanup()


def batch_list(text: str) -> list[int]:
    """``--columns-batch``: positive ints, comma-separated."""
    got = [int(x) for x in text.split(",") if x.strip()]
    if not got or min(got) < 1:
        raise argparse.ArgumentTypeError(f"--columns-batch: positive ints, got {text!r}")
    return got


def arguments(doc: str, msgs: int, rounds: int) -> argparse.Namespace:
    """``--msgs``, ``--rounds`` (these defaults), ``--dir`` and ``--columns-batch`` of a bench
    described by ``doc``."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--msgs", type=int, default=msgs)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--dir")
    ap.add_argument("--columns-batch", type=batch_list, default=[1000])
    return ap.parse_args()


def main() -> None:
    a = arguments(__doc__, 200_000, 3)
    for c, s, n, size in stores("read_cpu", a.msgs, a.dir):
        run = cases(c, s, n)
        for b in a.columns_batch:   # the same two reads at another count a call
            if b != 1000:
                run[("sqlite", b)] = sqlite_range(c, b)
                run[("get_columns", b)] = columns_read(s, n, b)
        best = dict.fromkeys(run, float("inf"))
        for _ in range(a.rounds):
            for name, f in run.items():
                t = time.thread_time()
                got = f()
                best[name] = min(best[name], time.thread_time() - t)
                assert got == n, (name, got)
        for key, secs in best.items():
            name, b = key if isinstance(key, tuple) else (key, None)
            base = n / best["sqlite" if b is None else ("sqlite", b)]
            row = {"bench": "read_cpu", "case": name, "body": size, "msgs": n,
                   "msgs_per_cpu_s": round(n / secs)}
            if b is not None:
                row["batch"] = b
            if name != "sqlite":
                row["vs_sqlite"] = round(n / secs / base, 2)
            if name in GOALS:
                row["goal"] = GOALS[name]
                row["met"] = row["vs_sqlite"] >= GOALS[name]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
