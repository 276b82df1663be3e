"""Append benchmark: put throughput of the commit log, against the disk's own rate; prints JSON.

    python bench/append.py [--quick] [--seconds S] [--dir DIR] [--recovery-gib G] [--dd-mib N]

One JSON object per line, each with "bench": "append" and a "case":

* ``dd``: the disk's sequential write rate, ``dd if=/dev/zero bs=1M count=N conv=fdatasync``
  into the scratch directory (dd's own output is parsed; the figure includes the final sync).
* ``async``: ``flush="async"``, one producer thread calling ``put_batch`` with batches of
  1, 64 or 1024 messages of 100 B or 1 KiB bodies, for ``--seconds`` each.
* ``sync``: ``flush="sync"`` (group commit: a put returns after an fsync that covers it), with
  1 and 16 producer threads, **each thread putting batches of ``--sync-batch`` messages
  (default 1: one ``put_batch([msg])`` per call, i.e. single-message puts)**.
* ``sync`` with ``simulated_extra_flush_ms``: the 100 B sync cases again on a *simulated*
  slower device: every data flush sleeps ``--slow-flush-ms`` (default 2) after the real one,
  as a disk whose cache flush takes milliseconds would. On this VM's disk a flush takes about
  0.1 ms, so the real-disk ratio measures Python's per-put cost and thread hand-offs more than
  group commit; this case shows what group commit gives where the flush dominates.
* ``sparse``: the A/B of sparse, growing segment files (the default: blocks reserved and
  pre-faulted in steps ahead of the writer) against the old whole-file reservation and
  pre-fault at creation (``strata.files.segment.SPARSE = False``): async batches of 1024 x
  100 B and 1 KiB, the two alternating ``--ab-rounds`` times (default 2); each round's
  ``msgs_s``, the median ratio sparse / whole (target >= 0.9), and the blocks a new store
  takes after its first put (``du``, bytes) in each mode. With 1 GiB segments the whole-file
  mode's pre-fault of its segments is done before the timed window (the warm-up waits for
  it) while the sparse mode pre-faults during it; ``--quick`` (64 MiB segments) rolls
  within the window, so both pay their pre-faulting there (the steady state).
* ``ratio``: 1 KiB batch-1024 async MB/s / dd MB/s (target >= 0.25), sync 16 threads /
  sync 1 thread (target >= 10), 100 B batch-1024 async msgs/s (target >= 500,000). Targets are
  reported (``met``), never asserted.
* ``recovery``: a log of ``--recovery-gib`` GiB of 1 KiB messages in 1 GiB segments, stopped
  uncleanly (``store._abandon()`` leaves the abort marker), then reopened; the reopen
  CRC-verifies the unsealed segment(s). Time of ``strata.open`` and GB/s over the log bytes.

Every store case uses a fresh store (segment_size 1 GiB unless ``--quick``), one untimed batch
first (it waits for the first, pre-allocated and pre-faulted, segment), then a time-bounded loop.
Messages carry no keys or tags (plain topic + body; 8 queues, round robin); the dispatch
pipeline (consume queues) runs in the background as usual and shares the GIL with the producer.
"MBps" counts body bytes only (as peers.md does); "log_MBps" counts bytes appended to the log
(records with headers, topic and properties). "cpu" is process CPU seconds / wall seconds.
The scratch directory is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import strata
from strata.files import segment as segment_files
from strata.files.io import FileOps
from strata.store.message_store import MessageStore

from scratch import scratch_dir

GiB = 1 << 30
MiB = 1 << 20
POOL = 1024  # distinct random bodies per size (like the peer benchmarks)


def emit(obj: dict) -> dict:
    print(json.dumps(obj), flush=True)
    return obj


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def run_dd(directory: Path, mib: int) -> dict:
    target = directory / "dd.scratch"
    try:
        p = subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}",
                            "conv=fdatasync"], capture_output=True, text=True, check=True)
    finally:
        try:
            target.unlink()
        except FileNotFoundError:
            pass
    # e.g. "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.693 s, 1.5 GB/s"
    m = re.search(r"^(\d+) bytes .*copied, ([\d.,]+) s, ([\d.,]+) (\w?B)/s", p.stderr, re.M)
    if not m:
        raise RuntimeError(f"cannot parse dd output: {p.stderr!r}")
    nbytes, secs = int(m.group(1)), float(m.group(2).replace(",", "."))
    return emit({"bench": "append", "case": "dd", "bytes": nbytes, "seconds": secs,
                 "MBps": round(nbytes / secs / 1e6, 1),
                 "dd_says": f"{m.group(3)} {m.group(4)}/s", "cmd": f"dd bs=1M count={mib} "
                 "conv=fdatasync"})


def bodies(size: int) -> list[bytes]:
    return [os.urandom(size) for _ in range(POOL)]


def batches(size: int, batch: int, topic: str = "BenchTopic") -> list[list[strata.Message]]:
    """A few distinct pre-built batches (message construction is not timed)."""
    pool = bodies(size)
    n_batches = max(1, min(64, 4096 // batch))
    out, k = [], 0
    for _ in range(n_batches):
        b = []
        for _ in range(batch):
            b.append(strata.Message(topic, pool[k % POOL]))
            k += 1
        out.append(b)
    return out


def warm_up(store, bs) -> dict:
    """Untimed: keep putting while the background allocator prepares the *next* segment
    (requested when the first one was taken), and report the longest put meanwhile.  Its
    pre-fault (``mmap.madvise(MADV_POPULATE_WRITE)`` of the whole segment) holds the GIL, so
    a put that runs concurrently stalls for about as long as the pre-fault takes; the same
    stall recurs after every segment roll."""
    th = getattr(getattr(store.log.segments, "allocator", None), "_thread", None)
    if th is None or not th.is_alive():
        return {"roll_prefault_s": 0.0, "put_max_ms_during_prefault": 0.0}
    pc = time.perf_counter
    t0 = pc()
    worst = 0.0
    i = 0
    while th.is_alive():
        s = pc()
        store.put_batch(bs[i % len(bs)])
        worst = max(worst, pc() - s)
        i += 1
    return {"roll_prefault_s": round(pc() - t0, 3),
            "put_max_ms_during_prefault": round(worst * 1e3, 1)}


class SlowFlushOps(FileOps):
    """File operations whose data flush takes ``delay`` seconds longer than this disk's: a
    stand-in for a device with a slower cache flush (a SATA SSD without power-loss protection
    or a network volume take 1-5 ms; this VM's disk about 0.1 ms). Labelled as simulated."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def msync(self, path, mm, start, length, fd=None) -> None:
        super().msync(path, mm, start, length, fd)
        time.sleep(self.delay)


class Case:
    def __init__(self, root: Path, name: str, cfg: strata.StoreConfig,
                 file_ops: FileOps | None = None) -> None:
        self.dir = root / name
        shutil.rmtree(self.dir, ignore_errors=True)
        self.store = MessageStore(self.dir, cfg, file_ops=file_ops)

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def allocated_bytes(root: Path) -> int:
    """Bytes of blocks allocated under ``root`` (what ``du`` counts)."""
    total = 0
    for d, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.stat(os.path.join(d, f)).st_blocks * 512
            except FileNotFoundError:   # renamed into place meanwhile
                pass
    return total


def async_case(root: Path, size: int, batch: int, seconds: float, seg: int,
               sparse: bool | None = None) -> dict:
    extra: dict = {}
    if sparse is not None:
        segment_files.SPARSE = sparse
        extra["sparse"] = sparse
    c = Case(root, f"async-{size}-{batch}", strata.StoreConfig(segment_size=seg, flush="async"))
    try:
        store = c.store
        bs = batches(size, batch)
        store.put_batch(bs[0])                     # untimed: waits for the first segment
        if sparse is not None:
            store.wait_dispatched(60)
            store.flush()
            extra["disk_bytes_after_first_put"] = allocated_bytes(c.dir)
        stall = warm_up(store, bs)
        put = store.put_batch
        nb = len(bs)
        log0 = store.log.max_offset()
        n = i = 0
        pc = time.perf_counter
        worst = 0.0
        t0 = e = pc()
        c0 = time.process_time()
        deadline = t0 + seconds
        while True:
            s = e
            put(bs[i])
            e = pc()
            if e - s > worst:
                worst = e - s
            n += batch
            i += 1
            if i == nb:
                i = 0
            if e >= deadline:
                break
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        log_bytes = store.log.max_offset() - log0
        t1 = time.perf_counter()
        store.wait_dispatched(120)
        drain = time.perf_counter() - t1
        return emit({"bench": "append", "case": "async", **extra, "body": size, "batch": batch,
                     "threads": 1, "msgs": n, "seconds": round(dt, 3),
                     "msgs_s": round(n / dt), "MBps": round(n * size / dt / 1e6, 1),
                     "log_MBps": round(log_bytes / dt / 1e6, 1), "cpu": round(cpu / dt, 2),
                     "max_put_ms": round(worst * 1e3, 2), **stall,
                     "dispatch_drain_s": round(drain, 3), "rss_mib": rss_mib()})
    finally:
        c.close()
        segment_files.SPARSE = True


def sparse_ab(root: Path, seconds: float, seg: int, rounds: int) -> dict:
    """Sparse growing segments against whole-file reservation, alternating in one run."""
    out: dict = {"bench": "append", "case": "sparse"}
    for size in (100, 1024):
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(rounds):
            for sparse in (False, True):
                runs[sparse].append(async_case(root, size, 1024, seconds, seg, sparse))
        ratios = sorted(s["msgs_s"] / w["msgs_s"] for s, w in zip(runs[True], runs[False]))
        ratio = ratios[len(ratios) // 2] if len(ratios) % 2 else \
            (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
        out[f"{size}B_b1024_whole_msgs_s"] = [r["msgs_s"] for r in runs[False]]
        out[f"{size}B_b1024_sparse_msgs_s"] = [r["msgs_s"] for r in runs[True]]
        out[f"{size}B_b1024_sparse_over_whole"] = round(ratio, 3)
        out[f"{size}B_target_0.9_met"] = ratio >= 0.9
        out[f"{size}B_new_store_disk_bytes_whole"] = runs[False][0]["disk_bytes_after_first_put"]
        out[f"{size}B_new_store_disk_bytes_sparse"] = runs[True][0]["disk_bytes_after_first_put"]
    return emit(out)


def sync_case(root: Path, size: int, threads: int, batch: int, seconds: float, seg: int,
              flush_delay_ms: float = 0.0) -> dict:
    c = Case(root, f"sync-{size}-{threads}", strata.StoreConfig(segment_size=seg, flush="sync"),
             SlowFlushOps(flush_delay_ms / 1e3) if flush_delay_ms else None)
    try:
        store = c.store
        bs = batches(size, batch)
        store.put_batch(bs[0])                     # untimed warm-up
        warm_up(store, bs)
        counts = [0] * threads
        timeouts = [0] * threads
        lat: list[list[float]] = [[] for _ in range(threads)]
        start = threading.Barrier(threads + 1)
        stop_at = [0.0]

        def producer(k: int) -> None:
            put = store.put_batch
            mine = bs[k % len(bs)]
            n = to = 0
            ls = lat[k]
            pc = time.perf_counter
            start.wait()
            deadline = stop_at[0]
            while True:
                t = pc()
                res = put(mine)
                e = pc()
                ls.append(e - t)
                n += batch
                if res[-1].status is not strata.PutStatus.OK:
                    to += 1
                if e >= deadline:
                    break
            counts[k] = n
            timeouts[k] = to

        gc = getattr(store, "_group_commit", None)
        fs0 = getattr(gc, "fsyncs", 0)
        ths = [threading.Thread(target=producer, args=(k,)) for k in range(threads)]
        for th in ths:
            th.start()
        stop_at[0] = time.perf_counter() + seconds
        t0 = time.perf_counter()
        c0 = time.process_time()
        start.wait()
        for th in ths:
            th.join()
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        n = sum(counts)
        fsyncs = getattr(gc, "fsyncs", 0) - fs0
        all_lat = sorted(x for ls in lat for x in ls)
        p = lambda q: round(all_lat[min(len(all_lat) - 1, int(len(all_lat) * q))] * 1e3, 3)
        extra = {"simulated_extra_flush_ms": flush_delay_ms} if flush_delay_ms else {}
        return emit({"bench": "append", "case": "sync", **extra, "body": size, "batch": batch,
                     "threads": threads, "msgs": n, "puts": len(all_lat),
                     "seconds": round(dt, 3), "msgs_s": round(n / dt),
                     "MBps": round(n * size / dt / 1e6, 2),
                     "put_ms_p50": p(0.5), "put_ms_p99": p(0.99),
                     "flush_disk_timeouts": sum(timeouts), "cpu": round(cpu / dt, 2),
                     "group_commits": fsyncs,
                     "puts_per_commit": round(len(all_lat) / fsyncs, 2) if fsyncs else None,
                     "cpu_us_per_put": round(cpu / max(1, len(all_lat)) * 1e6, 1)})
    finally:
        c.close()


def recovery_case(root: Path, gib: float, seg: int, quick: bool) -> dict:
    d = root / "recovery"
    shutil.rmtree(d, ignore_errors=True)
    cfg = strata.StoreConfig(segment_size=seg, flush="async")
    target = int(gib * GiB)
    if target % seg == 0:
        target -= MiB   # stay short of a roll, so the last segment is unsealed and verified
    try:
        store = strata.open(d, cfg)
        bs = batches(1024, 1024)
        t0 = time.perf_counter()
        i = n = 0
        while store.log.max_offset() < target:
            # the last batches: only as many as still fit before the target
            room = target - store.log.max_offset()
            b = bs[i % len(bs)]
            if room < 1100 * len(b):
                b = b[:max(1, room // 1200)]
            store.put_batch(b)
            n += len(b)
            i += 1
        build = time.perf_counter() - t0
        store.wait_dispatched(300)
        log_bytes = store.log.max_offset()
        segs = len(list((d / "commitlog").iterdir()))
        store._abandon()                          # unclean stop: abort marker stays
        t0 = time.perf_counter()
        store = strata.open(d, cfg)
        reopen = time.perf_counter() - t0
        rep = store.recovery_report
        out = {"bench": "append", "case": "recovery", "log_bytes": log_bytes, "msgs": n,
               "segment_size": seg, "commitlog_files": segs, "build_s": round(build, 2),
               "reopen_s": round(reopen, 3), "GBps": round(log_bytes / reopen / 1e9, 2),
               "report_seconds": round(rep.seconds, 3),
               "records_verified": rep.records_verified,
               "verified_from": rep.verified_from,
               "scanned_segments": rep.scanned_segments,
               "trusted_segments": rep.trusted_segments,
               "lost_anything": rep.lost_anything,
               "summary": rep.summary(), "page_cache": "hot (log just written)"}
        store.close()
        return emit(out)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (< 60 s)")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per case (default 5, "
                    "1 with --quick)")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a new one under "
                    "/tmp); deleted afterwards")
    ap.add_argument("--recovery-gib", type=float, default=None,
                    help="log size for the recovery case (default 1; 0.05 with --quick)")
    ap.add_argument("--dd-mib", type=int, default=None, help="dd size (default 1024; 128 quick)")
    ap.add_argument("--sync-batch", type=int, default=1,
                    help="messages per put_batch call in the sync cases (default 1)")
    ap.add_argument("--slow-flush-ms", type=float, default=2.0,
                    help="extra delay per data flush in the simulated slow-device sync cases "
                    "(default 2; 0 skips them)")
    ap.add_argument("--ab-rounds", type=int, default=2,
                    help="rounds of the sparse / whole-file A/B (default 2)")
    ap.add_argument("--only", default="", help="comma list of dd,async,sparse,sync,recovery")
    a = ap.parse_args()
    seconds = a.seconds if a.seconds is not None else (1.0 if a.quick else 5.0)
    seg = 64 * MiB if a.quick else GiB
    rec_gib = a.recovery_gib if a.recovery_gib is not None else (0.05 if a.quick else 1.0)
    dd_mib = a.dd_mib if a.dd_mib is not None else (128 if a.quick else 1024)
    only = set(a.only.split(",")) if a.only else {"dd", "async", "sparse", "sync", "recovery"}

    scratch, remove_scratch = scratch_dir("append", a.dir)
    emit({"bench": "append", "case": "env", "python": sys.version.split()[0],
          "strata": getattr(strata, "__version__", "?"), "cpus": os.cpu_count(),
          "segment_size": seg, "seconds_per_case": seconds, "dir": str(scratch),
          "quick": a.quick, "sync_batch": a.sync_batch,
          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    res: dict = {}
    try:
        if "dd" in only:
            res["dd"] = run_dd(scratch, dd_mib)
        if "async" in only:
            for size in (100, 1024):
                for batch in (1, 64, 1024):
                    res[("async", size, batch)] = async_case(scratch, size, batch, seconds, seg)
        if "sparse" in only:
            res["sparse"] = sparse_ab(scratch, seconds, seg, a.ab_rounds)
        if "sync" in only:
            for size in (100, 1024):
                for threads in (1, 16):
                    res[("sync", size, threads)] = sync_case(scratch, size, threads,
                                                             a.sync_batch, seconds, seg)
            if a.slow_flush_ms:
                for threads in (1, 16):
                    res[("slow", threads)] = sync_case(scratch, 100, threads, a.sync_batch,
                                                       seconds, seg, a.slow_flush_ms)
        ratios: dict = {"bench": "append", "case": "ratio"}
        if ("async", 100, 1024) in res:
            v = res[("async", 100, 1024)]["msgs_s"]
            ratios["async_100B_b1024_msgs_s"] = v
            ratios["async_100B_target_500k_met"] = v >= 500_000
        if "dd" in res and ("async", 1024, 1024) in res:
            r = res[("async", 1024, 1024)]["MBps"] / res["dd"]["MBps"]
            ratios["async_1KiB_b1024_over_dd"] = round(r, 3)
            ratios["async_1KiB_log_bytes_over_dd"] = round(
                res[("async", 1024, 1024)]["log_MBps"] / res["dd"]["MBps"], 3)
            ratios["async_1KiB_target_0.25_met"] = r >= 0.25
        for size in (100, 1024):
            if ("sync", size, 1) in res and ("sync", size, 16) in res:
                r = res[("sync", size, 16)]["msgs_s"] / max(1, res[("sync", size, 1)]["msgs_s"])
                ratios[f"sync_{size}B_16t_over_1t"] = round(r, 2)
                ratios[f"sync_{size}B_target_10x_met"] = r >= 10
        if ("slow", 1) in res and ("slow", 16) in res:
            r = res[("slow", 16)]["msgs_s"] / max(1, res[("slow", 1)]["msgs_s"])
            ratios["simulated_slow_flush_ms"] = a.slow_flush_ms
            ratios["sync_100B_16t_over_1t_on_simulated_slow_flush"] = round(r, 2)
        if len(ratios) > 2:
            emit(ratios)
        if "recovery" in only:
            recovery_case(scratch, rec_gib, seg, a.quick)
    finally:
        remove_scratch()


if __name__ == "__main__":
    main()
