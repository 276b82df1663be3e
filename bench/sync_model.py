"""How fast can CPython threads do group-committed puts at all, with no store?

    .venv/bin/python bench/sync_model.py [--seconds 3] [--fsync-us 190] [--work-us 0,15]

A model of ``flush="sync"`` with group commit and nothing else: each producer thread does
``--work-us`` of busy Python work (a put's encoding), registers a lock of its own and blocks on
it; one flush thread takes every registered lock, sleeps ``--fsync-us`` with the GIL released
(an fdatasync) and releases them. It prints one JSON line per (threads, work) case and a ratio
line: the most 16 threads can gain over 1 on this machine when the only costs are CPython's
thread wake-ups and GIL hand-offs, to set beside ``bench/append.py``'s sync ratio.
"""

from __future__ import annotations

import argparse
import json
import threading
import time


def run(threads: int, work_us: float, fsync_us: float, seconds: float) -> dict:
    cv = threading.Condition(threading.Lock())
    pending: list[threading.Lock] = []
    stop = [False]

    def flusher() -> None:
        while True:
            with cv:
                cv.wait_for(lambda: pending or stop[0])
                if stop[0]:
                    return
                batch = pending[:]
                del pending[:]
            time.sleep(fsync_us / 1e6)
            for gate in batch:
                gate.release()

    counts = [0] * threads

    def producer(k: int) -> None:
        n = 0
        pc = time.perf_counter
        end = pc() + seconds
        while pc() < end:
            t = pc()
            while pc() - t < work_us / 1e6:
                pass
            gate = threading.Lock()
            gate.acquire()
            with cv:
                pending.append(gate)
                cv.notify()
            gate.acquire()
            n += 1
        counts[k] = n

    f = threading.Thread(target=flusher)
    f.start()
    c0, t0 = time.process_time(), time.perf_counter()
    ths = [threading.Thread(target=producer, args=(k,)) for k in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    with cv:
        stop[0] = True
        cv.notify()
    f.join()
    n = sum(counts)
    return {"bench": "sync_model", "case": "model", "threads": threads, "work_us": work_us,
            "fsync_us": fsync_us, "puts_s": round(n / dt),
            "cpu_us_per_put": round(cpu / n * 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--fsync-us", type=float, default=190.0)
    ap.add_argument("--work-us", default="0,15")
    args = ap.parse_args()
    for work in (float(w) for w in args.work_us.split(",")):
        one, many = (run(t, work, args.fsync_us, args.seconds) for t in (1, 16))
        for row in (one, many):
            print(json.dumps(row), flush=True)
        print(json.dumps({"bench": "sync_model", "case": "ratio", "work_us": work,
                          "threads16_over_1": round(many["puts_s"] / one["puts_s"], 2)}),
              flush=True)


if __name__ == "__main__":
    main()
