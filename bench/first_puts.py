"""The first puts after ``open``: what the compiled reader's one-time load costs them; JSON lines.

    python bench/first_puts.py [--messages N] [--rounds R] [--dir DIR]

A writable store's dispatch thread loads the compiled record reader (numba and its cached
code, ~0.4 s of CPU) as it starts, while the first puts run and share the GIL with it. Each
round runs two fresh processes in turn, ``cold`` (open, then put at once) and ``preloaded``
(``strata.log.record_fields.load_reader()`` before opening), each putting ``--messages``
messages of 100 B in batches of 1,000 into a new store (async flush) and waiting until they
are dispatched. Rows:

* ``round``: per process, ``msgs_s`` (puts), ``incl_dispatch_msgs_s`` (until the consume
  queues hold them all) and process CPU seconds.
* ``ratio``: the median cold ÷ preloaded ``msgs_s`` over the rounds (1.0: the load costs the
  first puts nothing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time

from scratch import scratch_dir


def emit(obj: dict) -> dict:
    print(json.dumps(obj), flush=True)
    return obj


def one_process(directory: str, messages: int, preload: bool) -> None:
    """The measured process: open, put, wait for dispatch; prints one JSON object."""
    import strata
    if preload:
        from strata.log.record_fields import load_reader
        load_reader()
    bodies = [bytes([i % 256]) * 100 for i in range(1024)]
    cpu = time.process_time()
    with strata.open(directory, strata.StoreConfig(flush="async")) as store:
        store.put_batch([strata.Message("Warm", b"x")])   # waits for the first segment
        t = time.perf_counter()
        for start in range(0, messages, 1000):
            store.put_batch([strata.Message("FirstPuts", bodies[i & 1023])
                             for i in range(start, min(messages, start + 1000))])
        put = time.perf_counter() - t
        store.wait_dispatched(600)
        dispatched = time.perf_counter() - t
    print(json.dumps({"msgs_s": round(messages / put),
                      "incl_dispatch_msgs_s": round(messages / dispatched),
                      "cpu_s": round(time.process_time() - cpu, 3)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", choices=("cold", "preloaded"), help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        one_process(args.store, args.messages, args.child == "preloaded")
        return
    base, remove = scratch_dir("first-puts", args.dir)
    rates: dict[str, list[int]] = {"cold": [], "preloaded": []}
    try:
        for r in range(args.rounds):
            for kind in ("cold", "preloaded"):
                store = base / f"{kind}-{r}"
                out = subprocess.run([sys.executable, __file__, "--child", kind, "--store",
                                      str(store), "--messages", str(args.messages)],
                                     check=True, capture_output=True, text=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                rates[kind].append(row["msgs_s"])
                emit({"bench": "first_puts", "case": "round", "round": r, "process": kind,
                      "messages": args.messages, **row})
                shutil.rmtree(store, ignore_errors=True)
    finally:
        remove()
    emit({"bench": "first_puts", "case": "ratio", "rounds": args.rounds,
          "cold_over_preloaded": round(statistics.median(
              c / p for c, p in zip(rates["cold"], rates["preloaded"])), 2),
          "cold_msgs_s": rates["cold"], "preloaded_msgs_s": rates["preloaded"]})


if __name__ == "__main__":
    main()
