"""Tiered storage benchmark: upload throughput against the backend's own raw write of the same
bytes, and reading a queue's history from the tier against reading it locally; JSON lines.

    python bench/tiered.py [--mib M] [--size B] [--s3] [--dir DIR]

* ``upload``: a store of ``--mib`` MiB (default 256) of ``--size`` B messages (default 1024)
  over 8 queues is uploaded by ``tier_sync`` to a POSIX tier (and with ``--s3`` to moto's S3
  server started on 127.0.0.1); ``raw`` is the same number of bytes written by the backend
  itself as objects of the same sizes (``backend.put``: temp file + fsync + rename for POSIX,
  ``put_object``/multipart for S3), ``ratio`` = upload / raw (goal >= 0.8).
* ``read``: every queue consumed from offset 0 with 1024 messages per call, from the POSIX
  tier (``TieredQueueReader.get``, CRCs checked, cache cold at start) and locally
  (``store.get``); ``ratio`` = tier / local (goal >= 0.5).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
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


def upload(directory: Path, tier_url: str, endpoint: str | None, kind: str) -> None:
    cfg = strata.StoreConfig(segment_size=256 * MiB, tier_url=tier_url,
                             tier_endpoint_url=endpoint, index_slots=100_000,
                             index_entries=2_000_000)
    with strata.open(directory, cfg) as store:
        t = time.perf_counter()
        store.tier_sync(timeout_s=3600)
        took = time.perf_counter() - t
        up = store.tier.dispatcher.uploaded
        sizes = [c.log_bytes for q in store.tier.meta.meta.queues.values() for c in q.chunks]
    backend = open_backend(tier_url.rstrip("/") + "-raw", endpoint)
    blobs = [os.urandom(min(s, 1 << 20)) * (s // (1 << 20) + 1) for s in sizes[:1]]
    t = time.perf_counter()
    for i, s in enumerate(sizes):
        backend.put(f"raw/{i}", memoryview(blobs[0])[:s] if s <= len(blobs[0]) else os.urandom(s))
    raw = time.perf_counter() - t
    emit(case="upload", backend=kind, messages=up.messages, bytes=up.bytes, chunks=up.chunks,
         seconds=round(took, 3), mb_s=round(up.bytes / took / 1e6, 1),
         raw_seconds=round(raw, 3), raw_mb_s=round(sum(sizes) / raw / 1e6, 1),
         ratio=round(raw / took, 2))


def read(directory: Path, tier_url: str) -> None:
    with strata.open(directory, strata.StoreConfig(segment_size=256 * MiB, tier_url=tier_url,
                                                   index_slots=100_000,
                                                   index_entries=2_000_000)) as store:
        reader = store.tier.reader(cache_bytes=64 * MiB)
        out = {}
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
            out[name] = n / (time.perf_counter() - t)
        emit(case="read", messages=n, local_msgs_s=round(out["local"]),
             tier_msgs_s=round(out["tier"]), ratio=round(out["tier"] / out["local"], 2))


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    root = Path(a.dir or tempfile.mkdtemp(prefix="strata-bench-tiered-"))
    try:
        url = f"file://{root / 'tier'}"
        n = build(root / "store", a.mib, a.size, url, None)
        emit(case="build", messages=n, mib=a.mib, size=a.size)
        upload(root / "store", url, None, "posix")
        read(root / "store", url)
        if a.s3:
            proc, endpoint = moto()
            try:
                url = "s3://bench/t"
                build(root / "store-s3", a.mib, a.size, url, endpoint)
                upload(root / "store-s3", url, endpoint, "s3-moto")
            finally:
                proc.terminate()
                proc.wait()
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
