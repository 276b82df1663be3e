"""Checking a tier chunk's bytes against its metadata, in bulk (the reader side of chunk.py).

Pure functions over bytes already fetched: a chunk's ``.cq`` object against the size and
CRC32C the metadata counts, and a run of its ``.log`` records against their units — whole
records (magic, lengths at both ends, fields adding up), each record's own CRC32C, the
chunk's topic and queue id, consecutive queue offsets and the unit's size: the one compiled
record check the local and tier readers run (record_kernels, through the tier reader's
read_kernels.check_units), no per-record Python. A failure is a CorruptTierError naming the
object, the queue offset and the byte; nothing damaged is returned. Used by the Spark tier
read and ``strata spark tier-verify``.
"""

from __future__ import annotations

import numpy as np
from crc32c import crc32c

from strata.format.consume_queue import UNIT_DTYPE
from strata.format.record_table import CRC_MISMATCH, F_PHYS, F_STORE_TS, FIELDS, GOOD
from strata.tiered.errors import CorruptTierError
from strata.tiered.metadata import ChunkMeta

_NO_PHYS_LIMIT = 2**63 - 1   # check_records: any commit-log offset (chunk_problems checks them)


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
    """The field table (record_table ``F_*`` rows, a column per record, positions in ``buf``)
    of the records at ``positions`` of ``buf`` whose queue offsets are ``first_offset``,
    ``first_offset + 1``, ... and sizes ``sizes``, once every one of them passes the tier
    reader's compiled check (read_kernels.check_units); CorruptTierError naming the first that
    does not (``buf`` starts at byte ``base`` of the object; the error's ``queue_offset`` is
    that record's)."""
    from strata.tiered import read_kernels   # numba and the compiled checks, on first use

    n = len(positions)
    fields = np.empty((FIELDS, n), np.int64)
    status = np.empty(n, np.uint8)
    pos = np.empty(n, np.int64)
    good, _ = read_kernels.check_units(
        np.frombuffer(buf, np.uint8), positions.astype(np.int64, copy=False),
        sizes.astype(np.int64, copy=False), 0, 0, _NO_PHYS_LIMIT,
        np.frombuffer(topic.encode(), np.uint8), queue_id,
        np.arange(first_offset, first_offset + n, dtype=np.int64), pos,
        np.empty(n, np.int64), fields, status)
    if good != n:
        i = int(np.argmax(status != GOOD))
        what = "CRC32C" if status[i] == CRC_MISMATCH else \
            "lengths, magic, topic, queue, offset or CRC32C"
        err = CorruptTierError(
            f"{where}: the record of {topic}/{queue_id} offset {first_offset + i} (byte "
            f"{base + int(pos[i])}) fails its checks ({what})", where)
        err.queue_offset = first_offset + i
        raise err
    return fields


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
            f = check_records(log_raw, u["offset"], u["size"], topic, queue_id, c.first + lo,
                              paths["log"])
        except CorruptTierError as exc:
            out.append((paths["log"], getattr(exc, "queue_offset", -1), "record", str(exc)))
            return out
        times.append((int(f[F_STORE_TS].min()), int(f[F_STORE_TS].max())))
        phys.append((int(f[F_PHYS, 0]), int(f[F_PHYS, -1] + u["size"][-1])))
    lo_ts, hi_ts = min(t[0] for t in times), max(t[1] for t in times)
    if (lo_ts, hi_ts) != (c.min_ts, c.max_ts):
        out.append((paths["log"], -1, "times", f"records stored {lo_ts}..{hi_ts} ms, the "
                                               f"metadata says {c.min_ts}..{c.max_ts}"))
    if (phys[0][0], phys[-1][1]) != (c.first_phys, c.end_phys):
        out.append((paths["log"], -1, "offsets", f"records from commit-log offset "
                                                 f"{phys[0][0]} to {phys[-1][1]}, the metadata "
                                                 f"says {c.first_phys} to {c.end_phys}"))
    return out
