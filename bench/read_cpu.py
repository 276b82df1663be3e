"""Reads side by side by the reading thread's CPU time: SQLite's range read, ``get`` (counting,
and reading every body), ``scan`` reading every body and ``get_columns``; prints JSON lines.

    python bench/read_cpu.py [--msgs N] [--rounds R] [--dir D]

``consume.py``'s peer rows time the same reads by the wall clock; on a shared machine with
many runnable processes the wall clock mostly measures the wait for a core, so this bench
counts ``time.thread_time()`` of the thread doing the reads (the store's background threads
are idle then: everything was dispatched before). One table / one queue of N messages of
100 B and of N / 5 of 1 KiB, 1000 messages per call, every case once a round (best round
kept); ``get_bodies`` reads the bodies alone (``GetResult.bodies()``: a bytes object each, no
message objects), for consumers that want only those (no goal of its own); ``vs_sqlite`` is the case's messages per CPU second over SQLite's. Targets (issue 27):
``get`` reading every body ≥ 2.5×, ``scan`` reading every body ≥ 3×, ``get_columns`` ≥ 10×.
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


def cases(c, s, n: int) -> dict:
    def sqlite_read():
        q, last, got = "SELECT id, body FROM msgs WHERE id > ? ORDER BY id LIMIT 1000", 0, 0
        while True:
            rows = c.execute(q, (last,)).fetchall()
            if not rows:
                return got
            got += len(rows)
            last = rows[-1][0]

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

    def columns():
        off = got = 0
        while off < n:
            r = s.get_columns("t", 0, off, 1000)
            got += r.batch.num_rows
            off = r.next_offset
        return got

    return {"sqlite": sqlite_read, "get_count": get(False), "get_body_read": get(True),
            "get_bodies": bodies, "scan_body_read": scan_bodies, "get_columns": columns}


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


def arguments(doc: str, msgs: int, rounds: int) -> argparse.Namespace:
    """``--msgs``, ``--rounds`` (these defaults) and ``--dir`` of a bench described by
    ``doc``."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--msgs", type=int, default=msgs)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--dir")
    return ap.parse_args()


def main() -> None:
    a = arguments(__doc__, 200_000, 3)
    for c, s, n, size in stores("read_cpu", a.msgs, a.dir):
        run = cases(c, s, n)
        best = dict.fromkeys(run, float("inf"))
        for _ in range(a.rounds):
            for name, f in run.items():
                t = time.thread_time()
                got = f()
                best[name] = min(best[name], time.thread_time() - t)
                assert got == n, (name, got)
        base = n / best["sqlite"]
        for name, secs in best.items():
            row = {"bench": "read_cpu", "case": name, "body": size, "msgs": n,
                   "msgs_per_cpu_s": round(n / secs)}
            if name != "sqlite":
                row["vs_sqlite"] = round(n / secs / base, 2)
            if name in GOALS:
                row["goal"] = GOALS[name]
                row["met"] = row["vs_sqlite"] >= GOALS[name]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
