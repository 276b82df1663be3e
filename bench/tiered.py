"""Tiered storage benchmark: upload throughput against the backend's own raw write of the same
bytes, reading a queue's history from the tier against reading it locally, a Spark read of
tiered history against Parquet of the same rows, and memory while uploading; JSON lines.

    python bench/tiered.py [--mib M] [--size B] [--rounds R] [--s3] [--spark] [--big]
                           [--dir DIR]

* ``upload``: a store of ``--mib`` MiB (default 256) of ``--size`` B messages (default 1024,
  one key each) over 8 queues is uploaded by ``tier_sync`` to a fresh POSIX tier (and with
  ``--s3`` to moto's S3 server started on 127.0.0.1); ``raw`` is a plain file copy of as
  many bytes: read from the store's commit-log files in order and written by the backend
  itself as objects of the same sizes (``backend.put``: temp file + fsync + rename for POSIX,
  ``put_object``/multipart for S3). ``--rounds`` rounds alternate upload
  and raw (a slow spell of the shared machine hits both); ``ratio`` = raw seconds / upload
  seconds of the best round of each (goal >= 0.8), ``median_ratio`` round by round, after
  one untimed upload (the compiled chunk builder loads, as in a running store).
  POSIX also times ``direct``: the same pieces written as the backend writes a chunk's
  ``.log`` (aligned memory, O_DIRECT, fsync, rename, one directory fsync):
  ``direct_ratio`` = its best round's seconds / the upload's, a stricter baseline than the
  plain copy, which goes through the page cache.
  ``rss_mib``: the process's resident memory sampled every 50 ms during the upload (start,
  max, end).
* ``read``: every queue consumed from offset 0 with 1024 messages per call, from the POSIX
  tier (``TieredQueueReader.get``, CRCs checked, a fresh reader with a cold cache each round)
  and locally (``store.get``), both lazy ``MessageBatch``es; after one untimed get of each
  (the compiled kernels load), ``--rounds`` interleaved rounds; ``ratio`` = tier / local of
  the best round of each (goal >= 0.5), ``median_ratio`` round by round.
* ``spark`` (``--spark``): on ``local[2]``, ``spark.read.format("strata").option("tierUrl",
  ...)`` (the tier alone) into the ``noop`` sink against ``spark.read.parquet`` of the same
  rows (written once from the tier read) and against the same read of the store's local files
  (``local``), after one warm-up of each, ``--rounds`` interleaved rounds; ``ratio`` = Parquet
  seconds / tier seconds of the best rounds, ``tier_vs_local`` = local seconds / tier seconds.
* ``--big``: ``--mib 5120`` and only the upload case with its RSS samples (memory flat while
  uploading >= 5 GiB of log).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import statistics
import tempfile
import threading
import time
from pathlib import Path

import strata
from strata.tiered import service
from strata.tiered.connect import open_backend
from strata.tiered.dispatcher import UploadPolicy

MiB = 1 << 20


def emit(**kw) -> None:
    print(json.dumps({"bench": "tiered", **kw}), flush=True)


def build(directory: Path, mib: int, size: int, tier_url: str, endpoint: str | None) -> int:
    cfg = strata.StoreConfig(segment_size=256 * MiB, tier_url=tier_url,
                             tier_endpoint_url=endpoint, index_slots=100_000,
                             index_entries=2_000_000)
    n = mib * MiB // size
    body = os.urandom(size)
    service.DEFAULT_POLICY = UploadPolicy(interval_s=3600, min_chunk_bytes=1 << 40)
    with strata.open(directory, cfg) as store:
        for lo in range(0, n, 1024):
            store.put_batch([strata.Message("bench", body, keys=(f"k{i}",))
                             for i in range(lo, min(n, lo + 1024))])
        store.flush()
        store.wait_dispatched()
    return n


class RssSampler:
    """The process's resident memory (/proc/self/status: RssAnon, the heap and buffers, and
    RssFile, mapped file pages) every ``every_s`` seconds, in a thread."""

    def __init__(self, every_s: float = 0.05) -> None:
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    @staticmethod
    def rss() -> tuple[int, int]:
        got = {}
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:")):
                    k, v = line.split(":")
                    got[k] = int(v.split()[0]) * 1024
        return got["RssAnon"], got["RssFile"]

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            self.samples.append(self.rss())
            self._stop.wait(every_s)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.rss())

    def summary(self) -> dict:
        out = {"samples": len(self.samples)}
        for i, name in enumerate(("anon", "file")):
            mib = [round(x[i] / MiB, 1) for x in self.samples]
            out[name] = {"start": mib[0], "max": max(mib), "end": mib[-1]}
        return out


def file_pieces(log_dir: Path, sizes: list[int], buf=None):
    """A plain file copy's reads: ``sizes`` bytes after bytes read from the store's commit-log
    files in order (as much as the upload reads), each piece in one reused buffer (``buf``
    if given)."""
    files = sorted(log_dir.iterdir())
    buf = bytearray(max(sizes)) if buf is None else buf
    fh = None
    for size in sizes:
        got = 0
        while got < size:
            if fh is None:
                fh = open(files.pop(0), "rb", buffering=0)
            n = fh.readinto(memoryview(buf)[got:size])
            if not n:
                fh.close()
                fh = None
                continue
            got += n
        yield memoryview(buf)[:size]
    if fh is not None:
        fh.close()


def direct_copy(root: Path, log_dir: Path, sizes: list[int]) -> float:
    """Seconds to write the same pieces as ``file_pieces`` reads into files under ``root`` as
    the POSIX backend writes a chunk's .log now: from 4 KiB-aligned memory with O_DIRECT (the
    last partial block buffered), fsync, rename, one directory fsync at the end; the files
    are deleted after. A stricter baseline than the plain copy, which a user would write
    through the page cache."""
    import fcntl
    from strata.tiered.chunk import aligned_empty
    root.mkdir(parents=True, exist_ok=True)
    buf = aligned_empty(max(sizes))
    pieces = file_pieces(log_dir, sizes, memoryview(buf))   # read straight into it
    t = time.perf_counter()
    names = []
    for i, size in enumerate(sizes):
        next(pieces)
        tmp = root / f"{i}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        whole = size - size % 4096
        done = os.write(fd, memoryview(buf)[:whole])
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        while done < size:
            done += os.write(fd, memoryview(buf)[done:size])
        os.fsync(fd)
        os.close(fd)
        os.replace(tmp, root / str(i))
        names.append(root / str(i))
    fd = os.open(root, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    took = time.perf_counter() - t
    for f in names:
        f.unlink()
    return took


def upload(directory: Path, tier_url: str, endpoint: str | None, kind: str,
           rounds: int) -> None:
    cfg = strata.StoreConfig(segment_size=256 * MiB, tier_url=tier_url,
                             tier_endpoint_url=endpoint, index_slots=100_000,
                             index_entries=2_000_000)
    ups, raws, directs, rss = [], [], [], None
    backend = open_backend(tier_url.rstrip("/") + "-raw", endpoint)
    for r in range(-1 if rounds > 1 else 0, rounds):   # -1 untimed: the kernels load first
        url = f"{tier_url.rstrip('/')}-{r}"
        cfg = dataclasses.replace(cfg, tier_url=url)
        meta = directory / "tiered"
        shutil.rmtree(meta, ignore_errors=True)       # a fresh tier every round: the store
        (directory / "config" / "tier.json").unlink(missing_ok=True)   # forgets the last one
        with strata.open(directory, cfg) as store:
            with RssSampler() as sampler:
                t, c = time.perf_counter(), time.process_time()
                store.tier_sync(timeout_s=7200)
                took, cpu = time.perf_counter() - t, time.process_time() - c
            up = store.tier.dispatcher.uploaded
            sizes = [c.log_bytes for q in store.tier.meta.meta.queues.values()
                     for c in q.chunks]
        if r < 0:
            if kind == "posix":
                shutil.rmtree(url[len("file://"):], ignore_errors=True)
            continue
        rss = rss or sampler.summary()
        ups.append((took, cpu))
        if kind == "posix" and r < rounds - 1:   # the last one is read below
            shutil.rmtree(url[len("file://"):], ignore_errors=True)
        t = time.perf_counter()
        for i, piece in enumerate(file_pieces(directory / "commitlog", sizes)):
            backend.put(f"raw/{r}/{i}", piece)
        raws.append(time.perf_counter() - t)
        for i in range(len(sizes)):
            backend.delete(f"raw/{r}/{i}")
        if kind == "posix":
            directs.append(direct_copy(Path(tier_url[len("file://"):].rstrip("/") + "-direct"),
                                       directory / "commitlog", sizes))
    took, cpu = min(ups)
    raw = min(raws)
    emit(case="upload", backend=kind, messages=up.messages, bytes=up.bytes, chunks=up.chunks,
         rounds=rounds, seconds=round(took, 3), cpu_seconds=round(cpu, 3),
         mb_s=round(up.bytes / took / 1e6, 1), raw_seconds=round(raw, 3),
         raw_mb_s=round(sum(sizes) / raw / 1e6, 1), ratio=round(raw / took, 2),
         median_ratio=round(statistics.median(r / u[0] for r, u in zip(raws, ups)), 2),
         rounds_ratio=[round(r / u[0], 2) for r, u in zip(raws, ups)],
         goal=0.8, met=raw / took >= 0.8, rss_mib=rss,
         **({"direct_seconds": round(min(directs), 3),
             "direct_ratio": round(min(directs) / took, 2),
             "direct_median_ratio": round(statistics.median(
                 d / u[0] for d, u in zip(directs, ups)), 2)} if directs else {}))


def read(directory: Path, tier_url: str, rounds: int) -> None:
    with strata.open(directory, strata.StoreConfig(segment_size=256 * MiB, tier_url=tier_url,
                                                   index_slots=100_000,
                                                   index_entries=2_000_000)) as store:
        store.get("bench", 0, 0, 1)                       # numba and the compiled kernels load
        store.tier.reader().get("bench", 0, 0, 1)         # outside the timed rounds
        best: dict[str, list[float]] = {"local": [], "tier": []}
        for _r in range(rounds):
            reader = store.tier.reader(cache_bytes=64 * MiB)          # its cache cold
            for name, fetch in (("local", lambda q, o: store.get("bench", q, o, 1024).messages),
                                ("tier", lambda q, o: reader.get("bench", q, o, 1024))):
                t, n = time.perf_counter(), 0
                for q in range(8):
                    off = 0
                    while True:
                        got = fetch(q, off)
                        if not got:
                            break
                        n += len(got)
                        off += len(got)
                best[name].append(n / (time.perf_counter() - t))
        local, tier = max(best["local"]), max(best["tier"])
        emit(case="read", messages=n, rounds=rounds, local_msgs_s=round(local),
             tier_msgs_s=round(tier), ratio=round(tier / local, 2),
             median_ratio=round(statistics.median(t / lo for t, lo in zip(best["tier"],
                                                                           best["local"])), 2),
             rounds_ratio=[round(t / lo, 2) for t, lo in zip(best["tier"], best["local"])],
             goal=0.5, met=tier / local >= 0.5)


def moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    import boto3
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}").create_bucket(Bucket="bench")
    return proc, f"http://127.0.0.1:{port}"


def spark_case(root: Path, tier_url: str, rounds: int) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from strata.spark.jobs.session import spark_session
    spark = spark_session("local[2]", "bench-tiered")
    try:
        tier = spark.read.format("strata").option("tierUrl", tier_url) \
            .option("subscribe", "bench")
        pq = str(root / "parquet")
        tier.load().write.parquet(pq)
        local = spark.read.format("strata").option("subscribe", "bench")
        reads = {"tier": lambda: tier.load(), "parquet": lambda: spark.read.parquet(pq),
                 "local": lambda: local.load(str(root / "store"))}
        best = {k: [] for k in reads}
        for r in range(rounds + 1):                 # round 0 warms both up
            for name, df in reads.items():
                t = time.perf_counter()
                df().write.format("noop").mode("overwrite").save()
                if r:
                    best[name].append(time.perf_counter() - t)
        rows = spark.read.parquet(pq).count()
        tier_s, pq_s, local_s = min(best["tier"]), min(best["parquet"]), min(best["local"])
        emit(case="spark", rows=rows, rounds=rounds, tier_seconds=round(tier_s, 3),
             parquet_seconds=round(pq_s, 3), local_seconds=round(local_s, 3),
             tier_rows_s=round(rows / tier_s), parquet_rows_s=round(rows / pq_s),
             local_rows_s=round(rows / local_s), ratio=round(pq_s / tier_s, 2),
             tier_vs_local=round(local_s / tier_s, 2),
             median_ratio=round(statistics.median(p / t for p, t in zip(best["parquet"],
                                                                         best["tier"])), 2))
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--spark", action="store_true")
    ap.add_argument("--big", action="store_true", help="5 GiB, upload case only")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    if a.big:
        a.mib, a.rounds = max(a.mib, 5120), 1
    root = Path(a.dir or tempfile.mkdtemp(prefix="strata-bench-tiered-"))
    try:
        url = f"file://{root / 'tier'}"
        n = build(root / "store", a.mib, a.size, url, None)
        emit(case="build", messages=n, mib=a.mib, size=a.size)
        upload(root / "store", url, None, "posix", a.rounds)
        if not a.big:
            read(root / "store", f"{url}-{a.rounds - 1}", a.rounds)
        if a.spark and not a.big:
            spark_case(root, f"{url}-{a.rounds - 1}", a.rounds)
        if a.s3 and not a.big:
            proc, endpoint = moto()
            try:
                url = "s3://bench/t"
                build(root / "store-s3", a.mib, a.size, url, endpoint)
                upload(root / "store-s3", url, endpoint, "s3-moto", a.rounds)
            finally:
                proc.terminate()
                proc.wait()
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
