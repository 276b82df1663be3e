"""Kafka record batch v2 codec benchmark: strata's compiled decode/encode against kafka-python's
``kafka.record`` (pure Python) and aiokafka's C ``_crecords``, in one run; prints JSON lines.

    python bench/kafka_records.py [SECONDS_PER_CASE]

Each case is one 1000-record batch (8-byte keys, 100 B or 1 KiB values, no headers or two
headers per record), uncompressed unless named. ``decode``: strata.decode_record_set to
columns (no per-record Python objects); the peers iterate their batch reader and touch each
record's key, value and headers (their API makes one object per record). ``encode``: strata
from columns (what a Fetch has: positions in a buffer) and, to be fair to the peers, also from
Python objects (``from_lists`` + encode); the peers append Python objects to a builder.
``memcpy`` is the machine's floor: copying the batch's bytes once; for compressed cases
``decompress-only`` is the codec alone (cramjam on the batch's records). Figures are the best of a
few repeats (ns per record, records/s, MB/s of batch bytes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# bench/kafka.py (now bench/kafka_broker.py) used to shadow kafka-python's ``kafka`` package: drop this script's folder
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import cramjam
import numpy as np
from aiokafka.record.default_records import DefaultRecordBatch as ABatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as ABuilder
from kafka.record.default_records import DefaultRecordBatch as KBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KBuilder

from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import record_batch as rb

N = 1000
T0 = 1_700_000_000_000


def timed(fn, seconds: float) -> float:
    """Best seconds per call of ``fn`` over repeats lasting about ``seconds``."""
    fn()
    best = float("inf")
    end = time.perf_counter() + seconds
    while True:
        reps = 0
        t = time.perf_counter()
        while reps < 5 or time.perf_counter() - t < 0.02:
            fn()
            reps += 1
        best = min(best, (time.perf_counter() - t) / reps)
        if time.perf_counter() > end:
            return best


def records(value_size: int, nheaders: int):
    rng = np.random.default_rng(1)
    # letters from a 16-letter alphabet: compressible about 2:1, as text is
    return [(T0 + i, b"key%05d" % i, rng.integers(97, 113, value_size, np.uint8).tobytes(),
             [("trace-id", b"t-%d" % i), ("origin", b"bench")][:nheaders]) for i in range(N)]


def build(builder_cls, recs, codec: int = 0) -> bytes:
    b = builder_cls(2, codec, 0, -1, -1, -1, 1 << 26)
    for i, (ts, k, v, h) in enumerate(recs):
        b.append(i, ts, k, v, h)
    return bytes(b.build())


def read(batch_cls, data: bytes) -> None:
    for r in batch_cls(data):
        r.key, r.value, r.headers


def line(case: str, system: str, op: str, seconds: float, nbytes: int, **extra) -> dict:
    out = {"bench": "kafka_records", "case": case, "system": system, "op": op,
           "ns_per_record": round(seconds / N * 1e9, 1), "records_per_s": round(N / seconds),
           "MB_per_s": round(nbytes / seconds / 1e6, 1)}
    out.update(extra)
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="Kafka record batch v2 codec: strata's compiled "
                                 "decode/encode against kafka-python and aiokafka (JSON lines)")
    ap.add_argument("seconds", nargs="?", type=float, default=0.5,
                    help="seconds a case is repeated for (default 0.5)")
    seconds = ap.parse_args().seconds
    for value_size, nheaders, codec in ((100, 0, 0), (100, 2, 0), (1024, 0, 0), (100, 0, 3),
                                        (1024, 0, 4)):
        recs = records(value_size, nheaders)
        data = build(KBuilder, recs, codec)
        case = f"{value_size}B-values/{nheaders}-headers/{rb.CODEC_NAMES[codec]}"
        n = len(data)
        cols = rb.decode_record_set(data)
        assert cols.codec(0) == codec       # the builder sends uncompressed if it does not pay
        firsts, counts, bases = [0], [N], [0]
        out = np.empty(rb.encoded_size(cols, firsts, counts), np.uint8)
        plain_bytes = len(out)

        dec = timed(lambda: rb.decode_record_set(data), seconds)
        enc = timed(lambda: rb.encode_batches_into(out, 0, cols, firsts, counts, bases), seconds)
        ts = [r[0] for r in recs]
        keys = [r[1] for r in recs]
        vals = [r[2] for r in recs]
        hdrs = [[(k.encode(), v) for k, v in r[3]] for r in recs]
        enc_obj = timed(lambda: rb.encode_batches(rb.RecordColumns.from_lists(ts, keys, vals,
                                                                              hdrs),
                                                  firsts, counts, bases), seconds)
        src = np.frombuffer(data, np.uint8)
        dst = np.empty_like(src)
        cp = timed(lambda: np.copyto(dst, src), seconds)
        line(case, "strata", "decode", dec, n)
        line(case, "strata", "encode", enc, plain_bytes)
        line(case, "strata", "encode_from_objects", enc_obj, plain_bytes)
        line(case, "strata", "decode+encode", dec + enc, n + plain_bytes)
        line(case, "machine", "memcpy", cp, n)
        if codec:   # the codec alone: cramjam decompressing the batch's records
            blob = data[bk.HEADER_SIZE:]
            fn = {3: cramjam.lz4.decompress, 4: cramjam.zstd.decompress}[codec]
            line(case, "machine", "decompress-only", timed(lambda: fn(blob), seconds), n)
        for name, batch_cls, builder_cls in (("kafka-python", KBatch, KBuilder),
                                             ("aiokafka-c", ABatch, ABuilder)):
            d = timed(lambda: read(batch_cls, data), seconds)
            e = timed(lambda: build(builder_cls, recs, 0), seconds)
            line(case, name, "decode", d, n, strata_speedup=round(d / dec, 1))
            line(case, name, "encode", e, plain_bytes, strata_speedup=round(e / enc, 1))
        assert cols.batches[bk.B_COUNT, 0] == N


if __name__ == "__main__":
    main()
