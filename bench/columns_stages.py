"""Where a ``get_columns`` call's time goes, stage by stage, next to SQLite's range read of the
same messages; prints JSON lines (ns of the reading thread's CPU a message).

    python bench/columns_stages.py [--msgs N] [--rounds R] [--dir D] [--columns-batch 1000,4096]

One queue of N messages of 100 B and N / 5 of 1 KiB (``read_cpu.py``'s data; N a multiple of
5000: whole calls), 1000 messages a
call, every stage over the whole queue, best of R rounds by ``time.thread_time()``:

- ``whole``: ``get_columns`` as a consumer calls it;
- ``queue``: the consume-queue lookup, ``all_local``, min/max offset, the units read;
- ``kernel_in_place`` / ``kernel_copy``: ``read_views`` (the compiled pass and its Python
  wrapper) reading the records where they lie (zero-copy: what ``get_columns`` does) or
  copying them first (what it did before), each with and without the CRC32C;
- ``arrow``: ``arrow_read.views_batch``, the Arrow arrays and the record batch;
- ``one_call``: ``arrow_read.units_batch``, what ``whole`` runs for records lying back to
  back: the units read in place, the compiled pass and the C structs in one call, the import;
- ``fixed_call``: ``get_columns`` of ONE message, per call (the per-call part of ``whole``).

``sqlite`` is ``read_cpu.py``'s range read; ``x10_budget`` is a tenth of it: what ``whole`` must
reach for issue 27's goal (``get_columns`` ≥ 10× SQLite's range read). Each
``--columns-batch`` size other than 1000 adds ``sqlite`` and ``whole`` rows with ``"batch"``:
both reads at that count a call.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from read_cpu import arguments, cases, columns_read, sqlite_range, stores  # noqa: E402
from strata.log import batch_reader as br  # noqa: E402
from strata.store import arrow_read  # noqa: E402


def best_ns(f, msgs: int, rounds: int) -> float:
    """ns of thread CPU per message of ``f()``, best of ``rounds`` (after one warm-up)."""
    f()
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        f()
        best = min(best, time.thread_time() - t)
    return round(best / msgs * 1e9, 1)


def stages(c, s, n: int) -> dict:
    cq, _ = s._queue("t", 0)
    offs = list(range(0, n, 1000))
    units = [cq.read_unit_bytes(o, 1000) for o in offs]
    lim = s.confirmed_offset()
    seg = s.log.segments.find(0)
    reads = [br.read_views(seg, u, lim, verify_crc=True, topic="t", queue_id=0,
                           first_offset=o) for o, u in zip(offs, units)]

    def whole():
        for o in offs:
            s.get_columns("t", 0, o, 1000)

    def queue():
        for o in offs:
            q, _ = s._queue("t", 0)
            s.history.all_local("t", 0, q)
            q.min_offset(), q.max_offset()
            q.read_unit_bytes(o, 1000)

    def kernel(in_place: bool, crc: bool):
        def run():
            for o, u in zip(offs, units):
                br.read_views(seg, u, lim, verify_crc=crc, topic="t", queue_id=0,
                              first_offset=o, in_place=in_place)
        return run

    def arrow():
        for r in reads:
            arrow_read.views_batch(r)

    spans = [cq.unit_span(o, 1000) for o in offs]

    def one_call():
        for o, (useg, at, k) in zip(offs, spans):
            arrow_read.units_batch(s.log, useg, at, k, lim, verify_crc=True, topic="t",
                                      queue_id=0, first_offset=o)

    def fixed():
        for o in offs:
            s.get_columns("t", 0, o, 1)

    return {"sqlite": cases(c, s, n)["sqlite"], "whole": whole, "queue": queue,
            "kernel_in_place": kernel(True, True), "kernel_in_place_no_crc": kernel(True, False),
            "kernel_copy": kernel(False, True), "kernel_copy_no_crc": kernel(False, False),
            "arrow": arrow, "one_call": one_call, "fixed_call": fixed}


def main() -> None:
    a = arguments(__doc__, 100_000, 5)
    for c, s, n, size in stores("columns_stages", a.msgs, a.dir):
        got = {}
        for name, f in stages(c, s, n).items():
            per = len(range(0, n, 1000)) * (1 if name == "fixed_call" else 1000)
            got[name] = best_ns(f, per, a.rounds)
        for b in a.columns_batch:   # the whole call and SQLite at another count a call
            if b != 1000:
                got[("sqlite", b)] = best_ns(sqlite_range(c, b), n, a.rounds)
                got[("whole", b)] = best_ns(columns_read(s, n, b), n, a.rounds)
        for key, ns in got.items():
            name, b = key if isinstance(key, tuple) else (key, None)
            row = {"bench": "columns_stages", "body": size, "msgs": n, "stage": name,
                   "ns_per_msg" if name != "fixed_call" else "ns_per_call": ns}
            if b is not None:
                row["batch"] = b
            if name == "sqlite":
                row["x10_budget"] = round(ns / 10, 1)
            if name == "whole":
                row["vs_sqlite"] = round(got["sqlite" if b is None else ("sqlite", b)] / ns, 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
