"""The upload's chunk builder as it was before the compiled one (tiered/chunk_kernels): numpy
header checks, a crc32c call and a slice copy per record, hashlib per key. Kept here as the
reference the compiled builder must match byte for byte (tests only)."""

from __future__ import annotations

import hashlib

import numpy as np
from crc32c import crc32c

from strata.errors import CorruptRecordError
from strata.files.segment_queue import segment_runs
from strata.format import record as rec
from strata.format.consume_queue import UNIT_DTYPE
from strata.format.record_batch import HEADER_DTYPE, header_windows, u32_windows
from strata.format.segment import HEADER_AREA
from strata.tiered.chunk import Chunk
from strata.tiered.layout import KEY_ENTRY, key_hash, sort_keys
from strata.tiered.metadata import ChunkMeta

_MIN_RECORD = rec.HEADER_SIZE + 12 + rec.TRAILER_SIZE


# The numpy header check the store used before the compiled reader (record_kernels):
# kept here, with the old builder, as an independent second opinion.
def check_headers(buf, positions: np.ndarray, phys, limit: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed headers at ``positions`` (int64) of ``buf[:limit]`` and which of them start a
    whole message record carrying commit-log offset ``phys``: ``check_record``'s checks without
    the CRC (magic, lengths at both ends, field lengths adding up, within the limit).

    Returns (headers, ok, total length, host bytes); headers where ``ok`` is False are garbage.
    """
    ok = (positions >= 0) & (positions + _MIN_RECORD <= limit)
    if not ok.any():
        zero = np.zeros(len(positions), np.int64)
        return np.zeros(len(positions), HEADER_DTYPE), ok, zero, zero
    hdr = header_windows(buf, limit)[np.where(ok, positions, 0)].view(HEADER_DTYPE)
    total = hdr["total"].astype(np.int64)
    sys_flag = hdr["sys_flag"]
    hosts = (np.where(sys_flag & rec.SYSFLAG_BORN_HOST_V6, 18, 6)
             + np.where(sys_flag & rec.SYSFLAG_STORE_HOST_V6, 18, 6))
    ok &= hdr["magic"] == rec.MESSAGE_MAGIC
    ok &= hdr["phys"] == phys
    ok &= total == (rec.HEADER_SIZE + hosts + hdr["topic_len"].astype(np.int64)
                    + hdr["props_len"].astype(np.int64) + hdr["body_len"].astype(np.int64)
                    + rec.TRAILER_SIZE)
    ok &= positions + total <= limit
    ok &= u32_windows(buf, limit)[np.where(ok, positions + total - rec.TRAILER_SIZE, 0)] == total
    return hdr, ok, total, hosts


def crcs_match(buf, positions: np.ndarray, totals: np.ndarray, crcs: np.ndarray) -> np.ndarray:
    """Which of the whole records at ``positions`` (of lengths ``totals``) carry the right
    CRC32C ``crcs`` (their header's field): one crc32c call per record over the bytes after
    the CRC field, slicing a memoryview inline (no per-record numpy indexing)."""
    starts = positions.astype(np.int64, copy=False)
    with memoryview(buf) as mv:
        got = [crc32c(mv[a:b]) for a, b in zip((starts + rec.CRC_START).tolist(),
                                                (starts + totals).tolist())]
    return np.asarray(got, np.int64) == crcs

def key_hashes(topic: str, keys: list) -> np.ndarray:
    """``key_hash`` of many keys of one topic, the keys as their UTF-8 bytes."""
    start = hashlib.blake2b(f"{topic}#".encode(), digest_size=8).copy

    def one(key) -> bytes:
        h = start()
        h.update(key)
        return h.digest()

    return np.frombuffer(b"".join([one(k) for k in keys]), "<u8")


def build_chunk(log, topic: str, queue_id: int, first: int,
                units: np.ndarray, buffer: bytearray | None = None,
                intact: set[int] | None = None) -> Chunk:
    """The chunk of queue offsets [first, first + len(units)) whose local units are ``units``
    (all real, ascending commit-log offsets). CorruptRecordError names a damaged record;
    ValueError if a segment was closed meanwhile (retention): the caller tries again later.
    The .log bytes go into ``buffer`` when it is large enough (a buffer used again and again
    has its pages touched already: a fresh one costs a page fault per 4 KiB), else into a new
    one. ``intact``: base offsets of sealed segments whose bytes matched their footer's CRC
    (filled in here): their records need no CRC of their own.

    A batch path: per segment, one numpy pass checks every record's header (lengths, magic,
    offsets, queue) and one crc32c call per record its CRC; records that lie back to back in
    the log are copied as one piece; key entries come from the properties sections in bulk
    (records whose only property is one key, the common shape, need no parsing)."""
    phys = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    n = len(units)
    out_at = np.zeros(n + 1, np.int64)        # each record's position in the .log object
    np.cumsum(sizes, out=out_at[1:])
    total_bytes = int(out_at[-1])
    if buffer is not None and len(buffer) >= total_bytes:
        data = buffer
    else:   # grown by at least half, so chunks of varying sizes rarely need a new one
        data = bytearray(max(total_bytes, len(buffer) * 3 // 2 if buffer else 0))
    store_ts = np.empty(n, np.int64)
    key_parts: list[np.ndarray] = []
    touched: list = []
    for lo, hi, seg in segment_runs(list(log.segments.segments), phys):
        if seg is None or seg.closed:
            raise ValueError(f"commit-log offset {int(phys[lo])} is no longer stored")
        pos = phys[lo:hi] - seg.base_offset + HEADER_AREA
        end = HEADER_AREA + seg.committed
        mm = seg.mm
        hdr, ok, total, hosts = check_headers(mm, pos, phys[lo:hi], end)
        ok &= total == sizes[lo:hi]
        ok &= hdr["queue_offset"] == np.arange(first + lo, first + hi)
        ok &= hdr["queue_id"] == queue_id
        if ok.any() and not _intact(seg, intact):
            rows = np.flatnonzero(ok)
            ok[rows[~crcs_match(mm, pos[rows], total[rows], hdr["crc"][rows])]] = False
        if not ok.all():
            i = int(np.argmin(ok))
            raise CorruptRecordError(
                f"{topic}/{queue_id} offset {first + lo + i}: the record at commit-log "
                f"offset {int(phys[lo + i])} is damaged; not uploaded", int(phys[lo + i]))
        store_ts[lo:hi] = hdr["store_ts"]
        # where each record's properties start, absolute in the map
        props_at = pos + rec.HEADER_SIZE + hosts + hdr["topic_len"].astype(np.int64)
        ends = pos + sizes[lo:hi]
        # one copy per run of records that follow each other in the log
        cuts = np.flatnonzero(pos[1:] != ends[:-1]) + 1
        run_lo = np.concatenate(([0], cuts))
        run_hi = np.concatenate((cuts, [hi - lo]))
        src_a, src_b = pos[run_lo].tolist(), ends[run_hi - 1].tolist()
        dst = out_at[lo + run_lo]
        dst_end = (dst + (ends[run_hi - 1] - pos[run_lo])).tolist()
        with memoryview(mm) as mv, memoryview(data) as dv:
            for a, b, d, e in zip(src_a, src_b, dst.tolist(), dst_end):
                dv[d:e] = mv[a:b]      # a memoryview target: a third faster than bytearray's
            key_parts.append(_key_entries(mm, props_at, hdr["props_len"].astype(np.int64),
                                          hdr["store_ts"], np.arange(first + lo, first + hi),
                                          topic))
        touched.append(seg)
    cq = np.empty(n, UNIT_DTYPE)
    cq["size"] = sizes
    cq["offset"] = out_at[:-1]
    cq["tag"] = units["tag"]
    cq_bytes = cq.tobytes()
    keys = np.concatenate(key_parts) if key_parts else np.empty(0, KEY_ENTRY)
    key_arr = sort_keys(keys) if len(keys) else keys
    key_bytes = key_arr.tobytes()
    meta = ChunkMeta(first=first, count=n, log_bytes=total_bytes, cq_crc=crc32c(cq_bytes),
                     keys_count=len(key_arr), keys_crc=crc32c(key_bytes) if len(keys) else 0,
                     min_ts=int(store_ts.min()), max_ts=int(store_ts.max()),
                     first_phys=int(phys[0]), end_phys=int(phys[-1] + sizes[-1]))
    return Chunk(memoryview(data)[:total_bytes] if len(data) > total_bytes else data, cq_bytes,
                 key_bytes, meta, data, touched)


def _intact(seg, intact: set[int] | None) -> bool:
    """Whether a sealed segment's bytes match the CRC32C its footer holds (one hardware CRC
    over the segment instead of a call per record; remembered in ``intact``)."""
    if intact is None or not seg.sealed:
        return False
    if seg.base_offset not in intact:
        if seg.data_crc(seg.footer.data_length) != seg.footer.data_crc:
            return False   # each record is checked then, and the damaged one named
        intact.add(seg.base_offset)
    return True


# A properties section that is one KEYS entry and nothing else starts with these 6 bytes.
_KEYS_HEADER = np.frombuffer(b"\x04\x00KEYS", np.uint8)


def _key_entries(mm, props_at: np.ndarray, props_len: np.ndarray,
                 store_ts: np.ndarray, offsets: np.ndarray, topic: str) -> np.ndarray:
    """Key entries (KEY_ENTRY, unsorted) of records whose properties sections start at
    ``props_at`` of the map ``mm``: one per key and per unique key. A section that is a single
    KEYS entry (the common shape) is hashed straight from the map's bytes; others are parsed
    (record.dispatch_properties)."""
    out = np.empty(0, KEY_ENTRY)
    has = props_len > 0
    if not has.any():
        return out
    raw = np.frombuffer(mm, np.uint8)
    at = np.where(has, props_at, 0)
    # 8 bytes of every section's start (clipped at the map's end: only sections of 8 bytes
    # or more can be the common shape, and those lie inside it)
    head = raw[np.minimum(at[:, None] + np.arange(8), len(raw) - 1)]
    vlen = head[:, 6].astype(np.int64) | head[:, 7].astype(np.int64) << 8
    simple = has & (head[:, :6] == _KEYS_HEADER).all(axis=1) & (8 + vlen == props_len)
    rows = np.flatnonzero(simple)
    if len(rows):
        a = (props_at[rows] + 8).tolist()
        b = (props_at[rows] + 8 + vlen[rows]).tolist()
        out = np.empty(len(rows), KEY_ENTRY)
        # bytes slices of the map: for keys this short, faster than memoryview slices
        out["hash"] = key_hashes(topic, [mm[x:y] for x, y in zip(a, b)])
        out["store_ts"] = store_ts[rows]
        out["offset"] = offsets[rows]
    other = np.flatnonzero(has & ~simple)
    if len(other):
        extra = []
        for i in other.tolist():
            p = int(props_at[i])
            k, _tags, uniq = rec.dispatch_properties(mm[p:p + int(props_len[i])])
            for key in (*k, uniq) if uniq else k:
                extra.append((key_hash(topic, key), int(store_ts[i]), int(offsets[i])))
        if extra:
            out = np.concatenate((out, np.array(extra, KEY_ENTRY)))
    return out
