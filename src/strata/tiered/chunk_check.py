"""Checking a tier chunk's bytes against its metadata, in bulk (the reader side of chunk.py).

Pure functions over bytes already fetched: a chunk's ``.cq`` object against the size and
CRC32C the metadata counts, and a run of its ``.log`` records against their units — whole
records (magic, lengths at both ends, fields adding up), each record's own CRC32C, the
chunk's topic and queue id, consecutive queue offsets and the unit's size. numpy over all
records at once plus one crc32c call each: no per-record Python beyond that. A failure is a
CorruptTierError naming the object, the queue offset and the byte; nothing damaged is
returned. Used by the Spark tier read and ``strata spark tier-verify``.
"""

from __future__ import annotations

import numpy as np
from crc32c import crc32c

from strata.format import record as rec
from strata.format.consume_queue import UNIT_DTYPE
from strata.format.record_batch import HEADER_DTYPE, check_headers, crcs_match, header_windows
from strata.tiered.errors import CorruptTierError
from strata.tiered.metadata import ChunkMeta


def check_units(raw: bytes, c: ChunkMeta, where: str) -> np.ndarray:
    """The chunk's units from its ``.cq`` object's bytes ``raw``, if their size and CRC32C are
    the metadata's and they tile the ``.log`` object (ascending, back to back, inside
    ``log_bytes``)."""
    want = c.count * UNIT_DTYPE.itemsize
    if len(raw) != want:
        raise CorruptTierError(f"{where} holds {len(raw)} bytes, the metadata says {want}",
                               where)
    crc = crc32c(raw)
    if crc != c.cq_crc:
        raise CorruptTierError(f"{where} fails its CRC32C (metadata 0x{c.cq_crc:08x}, "
                               f"computed 0x{crc:08x})", where)
    units = np.frombuffer(raw, UNIT_DTYPE)
    sizes = units["size"].astype(np.int64)
    ends = units["offset"] + sizes
    if c.count and (units["offset"][0] != 0 or (sizes <= 0).any()
                    or (units["offset"][1:] != ends[:-1]).any() or ends[-1] != c.log_bytes):
        raise CorruptTierError(f"{where}: units do not tile the .log object of "
                               f"{c.log_bytes} bytes", where)
    return units


def check_records(buf, positions: np.ndarray, sizes: np.ndarray, topic: str, queue_id: int,
                  first_offset: int, where: str, base: int = 0) -> np.ndarray:
    """The headers (HEADER_DTYPE) of the records at ``positions`` of ``buf`` whose queue
    offsets are ``first_offset``, ``first_offset + 1``, ... and sizes ``sizes``, once every one
    of them passes its checks; CorruptTierError naming the first that does not (``buf`` starts
    at byte ``base`` of the object; the error's ``queue_offset`` is that record's)."""
    n = len(positions)
    limit = len(buf)
    pos = positions.astype(np.int64, copy=False)
    inside = (pos >= 0) & (pos + rec.HEADER_SIZE <= limit)
    phys = np.zeros(n, np.int64)
    if inside.all():   # the offsets the records carry: the log that wrote them
        phys = header_windows(buf, limit)[pos].view(HEADER_DTYPE)["phys"].astype(np.int64)
    hdr, ok, total, hosts = check_headers(buf, pos, phys, limit)
    ok &= total == sizes
    ok &= hdr["queue_offset"] == np.arange(first_offset, first_offset + n)
    ok &= hdr["queue_id"] == queue_id
    tb = np.frombuffer(topic.encode(), np.uint8)
    ok &= hdr["topic_len"] == len(tb)
    if ok.any() and len(tb):
        topic_at = pos + rec.HEADER_SIZE + hosts
        windows = np.lib.stride_tricks.as_strided(
            np.frombuffer(buf, np.uint8), (max(0, limit - len(tb) + 1), len(tb)), (1, 1),
            writeable=False)
        ok &= (windows[np.where(ok, topic_at, 0)] == tb).all(axis=1)
    if ok.any():
        rows = np.flatnonzero(ok)
        ok[rows[~crcs_match(buf, pos[rows], total[rows], hdr["crc"][rows])]] = False
    if not ok.all():
        i = int(np.argmin(ok))
        err = CorruptTierError(
            f"{where}: the record of {topic}/{queue_id} offset {first_offset + i} (byte "
            f"{base + int(pos[i])}) fails its checks (lengths, magic, topic, "
            "queue, offset or CRC32C)", where)
        err.queue_offset = first_offset + i
        raise err
    return hdr


def chunk_problems(backend, topic: str, queue_id: int,
                   c: ChunkMeta) -> list[tuple[str, int, str, str]]:
    """Everything wrong with one counted chunk on ``backend``, as (object path, queue offset
    or -1, kind, detail): objects missing or of other sizes than the metadata's, the ``.cq``
    and ``.keys`` CRCs, every record (checks_records), the store times and commit-log offsets
    the metadata counts, key entries inside the chunk's offsets and sorted."""
    from strata.tiered.layout import KEY_ENTRY, chunk_path

    out: list[tuple[str, int, str, str]] = []
    paths = {k: chunk_path(topic, queue_id, c.first, k) for k in ("log", "cq", "keys")}

    def fetch(kind: str, length: int) -> bytes | None:
        try:
            return backend.read(paths[kind], 0, length + 1)
        except FileNotFoundError:
            out.append((paths[kind], -1, "missing", "the metadata counts it, the tier does "
                                                    "not hold it"))
            return None

    log_raw = fetch("log", c.log_bytes)
    cq_raw = fetch("cq", c.count * UNIT_DTYPE.itemsize)
    if log_raw is not None and len(log_raw) != c.log_bytes:
        out.append((paths["log"], -1, "size", f"holds {len(log_raw)} bytes, the metadata says "
                                              f"{c.log_bytes}"))
        log_raw = None
    units = None
    if cq_raw is not None:
        try:
            units = check_units(cq_raw, c, paths["cq"])
        except CorruptTierError as exc:
            out.append((paths["cq"], -1, "units", str(exc)))
    if c.keys_count:
        raw = fetch("keys", c.keys_count * KEY_ENTRY.itemsize)
        if raw is not None:
            keys = np.frombuffer(raw[:len(raw) // KEY_ENTRY.itemsize * KEY_ENTRY.itemsize],
                                 KEY_ENTRY)
            if len(raw) != c.keys_count * KEY_ENTRY.itemsize or crc32c(raw) != c.keys_crc:
                out.append((paths["keys"], -1, "keys", f"{len(raw)} bytes with CRC32C "
                            f"0x{crc32c(raw):08x}; the metadata says {c.keys_count} entries, "
                            f"0x{c.keys_crc:08x}"))
            elif ((keys["offset"] < c.first) | (keys["offset"] >= c.end)).any() or \
                    (np.diff(keys["hash"].astype(np.float64)) < 0).any():
                out.append((paths["keys"], -1, "keys", "entries outside the chunk's offsets "
                                                       "or out of order"))
    if log_raw is None or units is None:
        return out
    step = 65536
    times, phys = [], []
    for lo in range(0, c.count, step):
        u = units[lo:lo + step]
        try:
            hdr = check_records(log_raw, u["offset"], u["size"].astype(np.int64), topic,
                                queue_id, c.first + lo, paths["log"])
        except CorruptTierError as exc:
            out.append((paths["log"], getattr(exc, "queue_offset", -1), "record", str(exc)))
            return out
        times.append((int(hdr["store_ts"].min()), int(hdr["store_ts"].max())))
        phys.append((int(hdr["phys"][0]), int(hdr["phys"][-1] + u["size"][-1])))
    lo_ts, hi_ts = min(t[0] for t in times), max(t[1] for t in times)
    if (lo_ts, hi_ts) != (c.min_ts, c.max_ts):
        out.append((paths["log"], -1, "times", f"records stored {lo_ts}..{hi_ts} ms, the "
                                               f"metadata says {c.min_ts}..{c.max_ts}"))
    if (phys[0][0], phys[-1][1]) != (c.first_phys, c.end_phys):
        out.append((paths["log"], -1, "offsets", f"records from commit-log offset "
                                                 f"{phys[0][0]} to {phys[-1][1]}, the metadata "
                                                 f"says {c.first_phys} to {c.end_phys}"))
    return out
