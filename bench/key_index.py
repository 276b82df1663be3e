"""Key index benchmark: put throughput and candidate-walk latency on N keys; prints JSON.

    python bench/key_index.py [N] [DIR]

N keys (default 1,000,000) go into one file of N/4 slots (the default 1:4 ratio) in batches of
1,000, each key ``topic#key-i`` on its own message; then random present and absent keys are
queried over the whole time range, through the Python walk (``candidates``, ``query_*``) and
the compiled one (``lookup``, ``lookup_*``), alternating key by key. DIR defaults to a fresh
temporary directory.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from strata.index.key_index import KeyIndex

BATCH = 1000
QUERIES = 20_000
T0 = 1_700_000_000_000


def pct(xs: list[float], p: float) -> float:
    return round(xs[min(len(xs) - 1, int(len(xs) * p))] * 1e6, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description="key index put throughput and lookup latency "
                                 "(JSON)")
    ap.add_argument("n", nargs="?", type=int, default=1_000_000,
                    help="keys to put (default 1,000,000)")
    ap.add_argument("dir", nargs="?", type=Path,
                    help="where the index goes (default: a temporary directory, removed after)")
    args = ap.parse_args()
    n = args.n
    root = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="ki-bench-"))
    directory = root / "index"
    slots = max(1, n // 4)
    items = [(f"TopicA#key-{i}", i * 300, T0 + i // 10) for i in range(n)]
    try:
        ki = KeyIndex(directory, slots=slots, entries=n + 1)
        t = time.perf_counter()
        for j in range(0, n, BATCH):
            ki.put_batch(items[j:j + BATCH])
        put_s = time.perf_counter() - t
        t = time.perf_counter()
        ki.put_batch(items[-BATCH:])                       # replay: all skipped
        replay_s = time.perf_counter() - t

        rng = random.Random(1)
        hit, miss, fast_hit, fast_miss = [], [], [], []
        for _ in range(QUERIES):
            i = rng.randrange(n)
            key = items[i][0]
            t = time.perf_counter()
            got = list(ki.candidates(key, 0, 1 << 62))
            hit.append(time.perf_counter() - t)
            assert i * 300 in got
            t = time.perf_counter()
            list(ki.candidates(f"TopicB#absent-{i}", 0, 1 << 62))
            miss.append(time.perf_counter() - t)
            t = time.perf_counter()
            got, _complete = ki.lookup(key, 0, 1 << 62)
            fast_hit.append(time.perf_counter() - t)
            assert i * 300 in got
            t = time.perf_counter()
            ki.lookup(f"TopicB#absent-{i}", 0, 1 << 62)
            fast_miss.append(time.perf_counter() - t)
        for xs in (hit, miss, fast_hit, fast_miss):
            xs.sort()
        t = time.perf_counter()
        ki.flush()
        flush_s = time.perf_counter() - t
        ki.close()
        t = time.perf_counter()
        KeyIndex(directory, slots=slots, entries=n + 1).close()   # includes the crash check
        reopen_s = time.perf_counter() - t
        info = {
            "keys": n,
            "slots": slots,
            "file_bytes": sum(p.stat().st_size for p in directory.iterdir()),
            "puts_per_s": round(n / put_s),
            "replay_batch_us": round(replay_s * 1e6, 1),
            "query_hit_p50_us": pct(hit, 0.50),
            "query_hit_p99_us": pct(hit, 0.99),
            "query_miss_p50_us": pct(miss, 0.50),
            "query_miss_p99_us": pct(miss, 0.99),
            "lookup_hit_p50_us": pct(fast_hit, 0.50),     # the compiled walk (KeyIndex.lookup)
            "lookup_hit_p99_us": pct(fast_hit, 0.99),
            "lookup_miss_p50_us": pct(fast_miss, 0.50),
            "lookup_miss_p99_us": pct(fast_miss, 0.99),
            "flush_s": round(flush_s, 3),
            "reopen_s": round(reopen_s, 3),
        }
        print(json.dumps(info, indent=2))
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
