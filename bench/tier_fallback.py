"""Reads that fall back to the tier: a queue's history consumed with ``store.get`` while it is
local, and again after local retention deleted it (answered from the POSIX tier, every record
CRC-checked, through the 64 MiB block cache), in one run; JSON lines.

    python bench/tier_fallback.py [--mib M] [--size B] [--reads N] [--dir DIR]

* ``get``: every one of 8 queues consumed from offset 0, 1024 messages per call: ``local``
  before ``clean_expired``, ``tier`` after it by the writer, ``tier_readonly`` by a read-only
  opener (which finds the tier in config/tier.json); ``ratio`` = tier / local (issue 13's
  goal for reading tiered history: >= 0.5).
* ``read_at``: ``--reads`` (default 2000) random records by commit-log offset, read with
  ``store.read_at`` while local and again once local retention deleted them (from the tier),
  each compared with the local answer: messages per second and tier / local. ``tier_first``
  is the first pass over the tier, ``tier`` the best of 3 more (the first pays for
  ``TieredQueueReader``'s record-offset arrays of the chunks it touches).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import strata

MiB = 1 << 20
QUEUES = 8


def emit(**kw) -> None:
    print(json.dumps({"bench": "tier_fallback", **kw}), flush=True)


def consume(store) -> tuple[float, int, list[int]]:
    """Messages per second reading every queue from 0; the count; their commit-log offsets."""
    t, n, phys = time.perf_counter(), 0, []
    for q in range(QUEUES):
        off = 0
        while off < store.max_offset("bench", q):
            r = store.get("bench", q, off, 1024)
            n += len(r.messages)
            phys += [m.commitlog_offset for m in r.messages]
            off = r.next_offset
    return n / (time.perf_counter() - t), n, phys


def read_at(store, offsets: list[int], want: dict | None = None) -> tuple[float, dict]:
    t = time.perf_counter()
    got = {p: store.read_at(p) for p in offsets}
    took = time.perf_counter() - t
    assert all(m is not None for m in got.values())
    if want is not None:
        assert all(got[p] == want[p] for p in offsets)
    return len(offsets) / took, got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    root = Path(a.dir or tempfile.mkdtemp(prefix="strata-bench-fallback-"))
    try:
        cfg = strata.StoreConfig(segment_size=16 * MiB, default_queues=QUEUES,
                                 tier_url=f"file://{root / 'tier'}", index_slots=100_000,
                                 index_entries=2_000_000)
        n = a.mib * MiB // a.size
        body = os.urandom(a.size)
        with strata.open(root / "store", cfg) as store:
            for lo in range(0, n, 1024):
                store.put_batch([strata.Message("bench", body, keys=(f"k{i}",))
                                 for i in range(lo, min(n, lo + 1024))])
            store.tier_sync(timeout_s=3600)
            local, count, phys = consume(store)
            sample = random.Random(13).sample(phys, min(a.reads, len(phys)))
            at_local, want = read_at(store, sample)
            far = int(time.time() * 1000) + 365 * 86_400_000
            deleted = 0
            while store.clean_expired(far):
                deleted += 1
            gone = sum(p < store.log.min_offset() for p in phys)
            tier, count_t, _ = consume(store)
            assert count_t == count
            tiered = [p for p in sample if p < store.log.min_offset()]
            at_first, _ = read_at(store, tiered, want)
            at_tier = max(read_at(store, tiered, want)[0] for _ in range(3))
        with strata.open(root / "store", readonly=True) as ro:
            tier_ro, count_ro, _ = consume(ro)
            assert count_ro == count
        emit(case="get", messages=count, size=a.size, deleted_locally=gone,
             local_msgs_s=round(local), tier_msgs_s=round(tier),
             tier_readonly_msgs_s=round(tier_ro), ratio=round(tier / local, 2),
             ratio_readonly=round(tier_ro / local, 2))
        emit(case="read_at", reads=len(sample), tier_reads=len(tiered),
             local_per_s=round(at_local), tier_first_per_s=round(at_first),
             tier_per_s=round(at_tier), ratio=round(at_tier / at_local, 3),
             ratio_first=round(at_first / at_local, 3))
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
