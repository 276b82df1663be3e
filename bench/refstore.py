"""Benchmark the ref store; prints one JSON object per line and never asserts a time.

    python bench/refstore.py [--messages 200000] [--restart-messages 1000000] [--dir /tmp/x]
    python bench/refstore.py --only lookup --lookup-keys 10000000

Each figure is printed next to this machine's own limit measured in the same run: a plain
``os.write`` + ``fdatasync`` of the same bytes (what any store must at least pay), and ``dd
bs=1M conv=fdatasync`` of as many bytes. Targets (reported, not enforced): issue 4, >= 200,000
writes/s of 1 KiB bodies in batches; utilisation >= 50% once GC has run; clean restart of 1M
messages >= 10x faster than an unclean one. Issue 27: the batched writes at >= 0.7 of the
disk limit; a key lookup (a read of a random present id, one at a time) with p99 <= 50 us at
10 M keys.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import strata.refstore as rs
from strata.files.io import FileOps, install, uninstall
from strata.format.refstore_record import OVERHEAD


def emit(**fields) -> None:
    """One JSON line, with the 1-minute load average (the machine is shared: read every
    wall-clock figure next to it)."""
    fields["load"] = round(os.getloadavg()[0], 2)
    print(json.dumps(fields), flush=True)


def mid(i: int) -> bytes:
    return i.to_bytes(16, "big")


def thread_cpu() -> dict[tuple[str, int], float]:
    """CPU seconds (user + system) so far of each of this process's threads, by (name, native
    id) (Linux ``/proc``; empty elsewhere): the store's server thread is the serial part of a
    write stream, so its CPU per message says what the wall-clock figure cannot on a busy
    machine. A thread that ends in between (the index's table preparer) is not here: its CPU
    is in the process's, which the write row gives beside these as ``other``."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        out[(t.name, t.native_id)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def disk_limit(directory: str, total_bytes: int, chunk: int = 1 << 20) -> float:
    """Seconds for os.write of ``total_bytes`` in 1 MiB chunks plus one fdatasync."""
    path = os.path.join(directory, "limit.bin")
    buf = os.urandom(chunk)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left = total_bytes
    while left > 0:
        left -= os.write(fd, buf[:min(chunk, left)])
    os.fdatasync(fd)
    os.close(fd)
    dt = time.perf_counter() - t0
    os.unlink(path)
    return dt


def dd_limit(directory: str, total_bytes: int) -> tuple[float, float | None] | None:
    """Seconds for ``dd if=/dev/zero bs=1M conv=fdatasync`` of ``total_bytes`` (rounded up to
    whole MiB, scaled back to ``total_bytes``) into a fresh file in ``directory``: measured
    around the process (its start included) and as dd itself reports it (its copy and the
    fdatasync only; None if not found in its output); None if dd is not there."""
    path = os.path.join(directory, "dd.bin")
    count = -(-total_bytes // (1 << 20))
    t0 = time.perf_counter()
    try:
        done = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={count}",
                               "conv=fdatasync"], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    finally:
        dt = time.perf_counter() - t0
        if os.path.exists(path):
            os.unlink(path)
    own = re.search(r"copied, ([0-9.]+) s", done.stderr)
    scale = total_bytes / (count << 20)
    return dt * scale, None if own is None else float(own.group(1)) * scale


class CountingFileOps(FileOps):
    """The production FileOps, counting fdatasyncs and write-back starts (a stream's figures:
    how many syncs it took, how long they waited in all and the last one alone — the one the
    final ``sync()`` waits for —, whether the write-back hint was given)."""

    def __init__(self) -> None:
        self.counts = {"fdatasync": 0, "fdatasync_s": 0.0, "last_fdatasync_s": 0.0,
                       "start_writeback": 0}

    def fdatasync(self, path, fd: int) -> None:
        t0 = time.perf_counter()
        super().fdatasync(path, fd)
        dt = time.perf_counter() - t0
        self.counts["fdatasync"] += 1
        self.counts["fdatasync_s"] = round(self.counts["fdatasync_s"] + dt, 4)
        self.counts["last_fdatasync_s"] = round(dt, 4)

    def start_writeback(self, path, fd: int, offset: int, length: int) -> bool:
        self.counts["start_writeback"] += 1
        return super().start_writeback(path, fd, offset, length)


def bench_throughput(base: str, n: int, batch: int, size: int) -> None:
    d = os.path.join(base, "throughput")
    body = os.urandom(size)
    total = n * (size + OVERHEAD)
    cpu0 = time.process_time()
    limit_s = disk_limit(base, total)
    limit_cpu = time.process_time() - cpu0
    emit(bench="disk_limit", what="os.write 1 MiB chunks + fdatasync", bytes=total,
         seconds=round(limit_s, 4), mb_per_s=round(total / limit_s / 1e6, 1),
         msgs_per_s_equiv=round(n / limit_s), cpu_us_per_msg=round(limit_cpu / n * 1e6, 3))
    dd = dd_limit(base, total)
    dd_s = None if dd is None else dd[0]
    if dd is not None:
        emit(bench="dd_limit", what="dd if=/dev/zero bs=1M conv=fdatasync", bytes=total,
             seconds=round(dd_s, 4), mb_per_s=round(total / dd_s / 1e6, 1),
             msgs_per_s_equiv=round(n / dd_s),
             dd_reported_s=None if dd[1] is None else round(dd[1], 4))

    # the batches are built before the clock starts: the figure is the store's (dd and the
    # os.write loop do not make their bytes either); the row "write_building_batches" below
    # times the same writes with each batch's pairs built inside the loop, as before
    batches = [[(mid(i), body) for i in range(start, min(n, start + batch))]
               for start in range(0, n, batch)]
    s = rs.open(d, "transient")
    c = s.client()
    c.write(mid(n), body)    # untimed: the first write waits for the compiled encoder to load
    s.sync()
    threads0 = thread_cpu()
    counting = CountingFileOps()
    install(counting)
    try:
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        for pairs in batches:
            c.write_batch(pairs)
        t_last = time.perf_counter()
        s.sync()
        dt = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        uninstall(counting)
    threads = {key[0]: round((v - threads0[key]) / n * 1e6, 2)
               for key, v in thread_cpu().items() if key in threads0}
    threads["other"] = round(cpu / n * 1e6 - sum(threads.values()), 2)
    emit(bench="write", messages=n, body_bytes=size, batch=batch, seconds=round(dt, 4),
         cpu_us_per_msg=round(cpu / n * 1e6, 3), cpu_vs_disk_limit=round(limit_cpu / cpu, 3),
         thread_cpu_us_per_msg=threads,
         msgs_per_s=round(n / dt), mb_per_s=round(total / dt / 1e6, 1),
         vs_disk_limit=round(limit_s / dt, 3),
         vs_dd=None if dd_s is None else round(dd_s / dt, 3),
         vs_dd_reported=None if dd is None or dd[1] is None else round(dd[1] / dt, 3),
         tail_s=round(dt - (t_last - t0), 4), **counting.counts, target_vs_disk_limit=0.7)

    t0 = time.perf_counter()
    for pairs in batches:
        c.write_batch(pairs)
    s.sync()
    dt = time.perf_counter() - t0
    emit(bench="write_fanout", messages=n, seconds=round(dt, 4), msgs_per_s=round(n / dt),
         note="second reference to stored ids: count only, no bytes written")

    order = list(range(n))
    random.Random(1).shuffle(order)
    t0 = time.perf_counter()
    for i in order:
        c.read(mid(i))
    dt = time.perf_counter() - t0
    emit(bench="read_random", messages=n, seconds=round(dt, 4), msgs_per_s=round(n / dt))

    t0 = time.perf_counter()
    for start in range(0, n, batch):
        c.remove([mid(i) for i in range(start, min(n, start + batch))])
        c.remove([mid(i) for i in range(start, min(n, start + batch))])
    s.sync()
    dt = time.perf_counter() - t0
    emit(bench="remove", removes=2 * n, seconds=round(dt, 4), removes_per_s=round(2 * n / dt))
    s.close()
    shutil.rmtree(d)
    del batches

    s = rs.open(d, "transient")
    c = s.client()
    c.write(mid(n), body)
    s.sync()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    for start in range(0, n, batch):
        c.write_batch([(mid(i), body) for i in range(start, min(n, start + batch))])
    s.sync()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    emit(bench="write_building_batches", messages=n, body_bytes=size, batch=batch,
         seconds=round(dt, 4), cpu_us_per_msg=round(cpu / n * 1e6, 3),
         msgs_per_s=round(n / dt), vs_disk_limit=round(limit_s / dt, 3),
         vs_dd=None if dd_s is None else round(dd_s / dt, 3),
         note="each batch's (id, body) pairs built inside the timed loop")
    s.close()
    shutil.rmtree(d)


def bench_gc(base: str, n: int, size: int) -> None:
    d = os.path.join(base, "gc")
    limit = 4 * 1024 * 1024
    s = rs.open(d, "transient", file_size_limit=limit, auto_gc=False)
    c = s.client()
    body = os.urandom(size)
    rnd = random.Random(2)
    for start in range(0, n, 1000):
        c.write_batch([(mid(i), body) for i in range(start, min(n, start + 1000))])
    s.sync()
    c.remove([mid(i) for i in range(n) if rnd.random() < 0.6])
    s.sync()
    before = s.stats()
    t0 = time.perf_counter()
    after = s.compact()
    dt = time.perf_counter() - t0
    emit(bench="gc_compact", messages=n, removed_fraction=0.6, seconds=round(dt, 4),
         combines=after.gc_combines, deletes=after.gc_deletes,
         live_mb_moved=round(after.gc_bytes_moved / 1e6, 2),
         moved_mb_per_s=round(after.gc_bytes_moved / dt / 1e6, 1),
         utilisation_before=round(before.utilisation, 3),
         utilisation_after=round(after.utilisation, 3),
         files_before=len(before.files), files_after=len(after.files))
    s.close()
    shutil.rmtree(d)


def bench_utilisation(base: str, rounds: int, per_round: int, size: int) -> None:
    """A queue-like workload where half of what is outstanding is removed each round."""
    d = os.path.join(base, "util")
    limit = 1024 * 1024
    s = rs.open(d, "transient", file_size_limit=limit)
    c = s.client()
    body = os.urandom(size)
    rnd = random.Random(3)
    outstanding: list[int] = []
    nxt = 0
    lowest_after_gc = 1.0
    for r in range(rounds):
        fresh = list(range(nxt, nxt + per_round))
        nxt += per_round
        c.write_batch([(mid(i), body) for i in fresh])
        outstanding.extend(fresh)
        rnd.shuffle(outstanding)
        half = len(outstanding) // 2
        c.remove([mid(i) for i in outstanding[:half]])
        outstanding = outstanding[half:]
        s.sync()
        st = s.wait_gc_idle()
        if st.gc_combines + st.gc_deletes > 0 and st.total_bytes > 2 * limit:
            lowest_after_gc = min(lowest_after_gc, st.utilisation)
        emit(bench="utilisation", round=r, files=len(st.files), total_mb=round(
            st.total_bytes / 1e6, 2), live_mb=round(st.valid_bytes / 1e6, 2),
            utilisation=round(st.utilisation, 3), combines=st.gc_combines,
            deletes=st.gc_deletes)
    emit(bench="utilisation_summary", lowest_after_gc=round(lowest_after_gc, 3), target=0.5)
    s.close()
    shutil.rmtree(d)


def bench_restart(base: str, n: int, size: int) -> None:
    d = os.path.join(base, "restart")
    s = rs.open(d)
    c = s.client("q")
    body = os.urandom(size)
    for start in range(0, n, 2000):
        c.write_batch([(mid(i), body) for i in range(start, min(n, start + 2000))])
    s.close()
    t0 = time.perf_counter()
    s = rs.open(d, client_refs=["q"])
    clean_s = time.perf_counter() - t0
    assert s.recovered_clean
    c = s.client("q")
    first = c.read(mid(n // 2)) == body
    s.crash()  # leave it as a killed process would: no clean-shutdown files
    t0 = time.perf_counter()
    s = rs.open(d, recover_refs=((mid(i), 1) for i in range(n)))
    dirty_s = time.perf_counter() - t0
    ok = s.client().read(mid(n - 1)) == body
    emit(bench="restart", messages=n, body_bytes=size, clean_seconds=round(clean_s, 4),
         unclean_seconds=round(dirty_s, 4), speedup=round(dirty_s / clean_s, 1),
         target_speedup=10, data_ok=bool(first and ok),
         scanned_mb=round(s.recovery.scanned_bytes / 1e6, 1))
    s.close()
    shutil.rmtree(d)


def percentiles(ns: list[int]) -> dict:
    ns = sorted(ns)
    at = lambda q: round(ns[min(len(ns) - 1, int(q * len(ns)))] / 1000, 2)  # noqa: E731
    return {"p50_us": at(0.5), "p99_us": at(0.99), "p999_us": at(0.999),
            "max_us": round(ns[-1] / 1000, 2)}


def raw_preads(d: str, where: list) -> list[int]:
    """Nanoseconds of a bare ``os.pread`` of each (ref, file, offset, size) record, one at a
    time on descriptors opened beforehand: what a read costs the OS alone."""
    from strata.refstore import layout
    fds = {}
    ns = []
    clock = time.perf_counter_ns
    for _, number, off, size in where:
        fd = fds.get(number)
        if fd is None:
            fd = fds[number] = os.open(layout.data_path(d, number), os.O_RDONLY)
        t0 = clock()
        os.pread(fd, size, off)
        ns.append(clock() - t0)
    for fd in fds.values():
        os.close(fd)
    return ns


def bench_lookup(base: str, n: int, size: int, samples: int) -> None:
    """Reads of random present ids, one at a time, in a store of ``n`` messages: as written,
    then after a clean restart (the saved index loaded as columns)."""
    d = os.path.join(base, "lookup")
    s = rs.open(d)
    c = s.client("q")
    body = os.urandom(size)
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        c.write_batch([(mid(i), body) for i in range(start, min(n, start + 1000))])
    s.sync()
    emit(bench="lookup_fill", messages=n, body_bytes=size,
         msgs_per_s=round(n / (time.perf_counter() - t0)))
    rnd = random.Random(4)
    keys = [mid(rnd.randrange(n)) for _ in range(samples)]
    raw_keys = [mid(rnd.randrange(n)) for _ in range(samples)]
    clock = time.perf_counter_ns
    for phase in ("written", "after_clean_restart"):
        if phase == "after_clean_restart":
            t0 = time.perf_counter()
            s.close()
            closed = time.perf_counter() - t0
            t0 = time.perf_counter()
            s = rs.open(d, client_refs=["q"])
            emit(bench="lookup_restart", messages=n, close_seconds=round(closed, 2),
                 open_seconds=round(time.perf_counter() - t0, 2))
            c = s.client("q")
        # the bare preads first, on their own sample: both meet the page cache as cold
        emit(bench="lookup", phase=phase, call="os.pread alone (the machine's limit)",
             keys=n, samples=samples,
             **percentiles(raw_preads(d, [s.locate(k) for k in raw_keys])))
        for what, fn in (("read", c.read), ("locate", s.locate)):
            ns = []
            wrong = 0
            for k in keys:
                t0 = clock()
                got = fn(k)
                ns.append(clock() - t0)
                wrong += got is None
            emit(bench="lookup", phase=phase, call=what, keys=n, samples=samples,
                 wrong=wrong, target_p99_us=50, **percentiles(ns))
    s.close()
    shutil.rmtree(d)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--throughput-rounds", type=int, default=1,
                   help="repeat the throughput part (each round measures the disk again)")
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--gc-messages", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--restart-messages", type=int, default=1_000_000)
    p.add_argument("--lookup-keys", type=int, default=1_000_000)
    p.add_argument("--lookup-body", type=int, default=100)
    p.add_argument("--lookup-samples", type=int, default=200_000)
    p.add_argument("--dir", default=None, help="scratch directory (default: a new temp dir)")
    p.add_argument("--only", choices=["throughput", "gc", "utilisation", "restart", "lookup"])
    a = p.parse_args(argv)
    base = a.dir or tempfile.mkdtemp(prefix="strata-refstore-bench-")
    os.makedirs(base, exist_ok=True)
    emit(bench="env", python=sys.version.split()[0], cpus=os.cpu_count(), dir=base)
    try:
        if a.only in (None, "throughput"):
            for _ in range(a.throughput_rounds):
                bench_throughput(base, a.messages, a.batch, a.body)
        if a.only in (None, "gc"):
            bench_gc(base, a.gc_messages, a.body)
        if a.only in (None, "utilisation"):
            bench_utilisation(base, a.rounds, 5000, a.body)
        if a.only in (None, "restart"):
            bench_restart(base, a.restart_messages, a.body)
        if a.only in (None, "lookup"):
            bench_lookup(base, a.lookup_keys, a.lookup_body, a.lookup_samples)
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
