"""Build one chunk of a queue from the local store's bytes (the upload's pure-ish half).

Given the queue's consume-queue units and the commit log, a chunk is the records of a run of
consecutive queue offsets copied verbatim, their units re-pointed at positions inside the
chunk, and key entries for ``topic#key`` lookups. Every record is checked (lengths, offsets,
queue, topic, CRC) before it is copied: damaged local bytes are never uploaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from strata.errors import CorruptRecordError
from strata.format.consume_queue import UNIT_DTYPE
from strata.files.segment_queue import segment_runs
from strata.log.commit_log import CommitLog
from strata.log.record_area import record_area
from strata.tiered.layout import KEY_ENTRY
from strata.tiered.metadata import ChunkMeta


@dataclass
class Chunk:
    """The three objects of a chunk and its metadata entry."""

    log: memoryview               # the .log bytes: a view of the start of ``buffer``
    cq: bytes
    keys: bytes
    meta: ChunkMeta
    buffer: np.ndarray | bytearray   # holds ``log``: give it to the next build_chunk
    touched: list                 # the commit-log segments it was read from


def build_chunk(log: CommitLog, topic: str, queue_id: int, first: int,
                units: np.ndarray, buffer: np.ndarray | bytearray | None = None,
                intact: set[int] | None = None, footer_now: bool = True) -> Chunk:
    """The chunk of queue offsets [first, first + len(units)) whose local units are ``units``
    (all real, ascending commit-log offsets). CorruptRecordError names a damaged record;
    ValueError if a segment was closed meanwhile (retention): the caller tries again later.
    The .log bytes go into ``buffer`` when it is large enough (a buffer used again and again
    has its pages touched already: a fresh one costs a page fault per 4 KiB), else into a new
    one. ``intact``: base offsets of sealed segments whose bytes matched their footer's CRC
    (filled in here): their records need no CRC of their own. ``footer_now`` False: a sealed
    segment not in ``intact`` yet has its records checked one by one instead of its footer's
    CRC over all of it now (the upload's first chunk: nothing is being written meanwhile, and
    one chunk's CRCs cost a third of a 256 MiB segment's).

    Compiled (``chunk_kernels.build_run``), one call per segment: every record checked
    (lengths, offsets, queue, topic, CRC), copied (records back to back in the log as one
    piece) and its key entries hashed in one loop, no Python per record."""
    kernels = _kernels()
    phys = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    n = len(units)
    out_at = np.zeros(n + 1, np.int64)        # each record's position in the .log object
    np.cumsum(sizes, out=out_at[1:])
    total_bytes = int(out_at[-1])
    if buffer is not None and len(buffer) >= total_bytes:
        data = buffer
    else:   # grown by at least half, so chunks of varying sizes rarely need a new one; numpy
        # leaves a new one's pages untouched (no zeroing pass) and asks for huge pages, so its
        # first fill costs a fraction of a bytearray's page faults
        data = aligned_empty(max(total_bytes,
                                 len(buffer) * 3 // 2 if buffer is not None else 0))
    out = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
    store_ts = np.empty(n, np.int64)
    name = topic.encode()
    scratch = kernels.scratch_for(name)
    topic_arr = np.frombuffer(name, np.uint8)
    cap = n + 16                               # one key each, the common shape; grown if not
    key_hash = np.empty(cap, np.uint64)
    key_ts = np.empty(cap, np.int64)
    key_off = np.empty(cap, np.int64)
    nkeys = 0
    touched: list = []
    for lo, hi, seg in segment_runs(log.segment_list(), phys):
        if seg is None or seg.closed:
            raise ValueError(f"commit-log offset {int(phys[lo])} is no longer stored")
        pos = phys[lo:hi] - seg.base_offset
        mm = record_area(seg)
        crc = not _intact(seg, intact, footer_now)
        at = 0
        while True:
            at, nkeys, why, detail = kernels.build_run(
                mm, pos, phys[lo:hi], sizes[lo:hi], seg.committed, crc,
                topic_arr, queue_id, first + lo, out, out_at[lo:hi], store_ts[lo:hi], at,
                scratch, len(name) + 1, key_hash, key_ts, key_off, nkeys)
            if why == kernels.KEYS_FULL:
                cap *= 2
                key_hash, key_ts, key_off = (np.resize(a, cap)
                                             for a in (key_hash, key_ts, key_off))
                continue
            break
        del mm
        if why == kernels.BAD_RECORD:
            i = lo + at
            raise CorruptRecordError(
                f"{topic}/{queue_id} offset {first + i}: the record at commit-log "
                f"offset {int(phys[i])} is damaged ({_WHY[detail]}); not uploaded",
                int(phys[i]))
        touched.append(seg)
    del out
    cq = np.empty(n, UNIT_DTYPE)
    cq["size"] = sizes
    cq["offset"] = out_at[:-1]
    cq["tag"] = units["tag"]
    cq_bytes = cq.tobytes()
    keys = np.empty(nkeys, KEY_ENTRY)
    if nkeys:   # by hash, then queue offset (entries come in offset order): quicksort, a
        # third of a stable sort's time, kept unless two entries share a hash
        hashes = key_hash[:nkeys]
        order = np.argsort(hashes, kind="quicksort")
        keys["hash"] = hashes[order]
        if (keys["hash"][1:] == keys["hash"][:-1]).any():
            order = np.argsort(hashes, kind="stable")
            keys["hash"] = hashes[order]
        keys["store_ts"] = key_ts[order]
        keys["offset"] = key_off[order]
    key_bytes = keys.tobytes()
    meta = ChunkMeta(first=first, count=n, log_bytes=total_bytes, cq_crc=crc32c(cq_bytes),
                     keys_count=nkeys, keys_crc=crc32c(key_bytes) if nkeys else 0,
                     min_ts=int(store_ts.min()), max_ts=int(store_ts.max()),
                     first_phys=int(phys[0]), end_phys=int(phys[-1] + sizes[-1]))
    return Chunk(memoryview(data)[:total_bytes], cq_bytes, key_bytes, meta, data, touched)


ALIGN = 4096


def aligned_empty(size: int) -> np.ndarray:
    """An uninitialised byte array of ``size`` whose first byte lies on a 4 KiB boundary: the
    POSIX backend writes a chunk's ``.log`` from it with O_DIRECT (straight from this buffer
    to the disk, no copy into the page cache), which wants block-aligned memory."""
    raw = np.empty(size + ALIGN, np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip:skip + size]


_WHY = ("no whole record of that offset there", "its CRC32C does not match",
        "not the size its consume-queue unit says", "another queue's, offset's or topic's "
        "message", "its properties overrun their section")


def _kernels():
    """``strata.tiered.chunk_kernels``, imported (numba, compiled code) on the first build."""
    from strata.tiered import chunk_kernels
    return chunk_kernels


def _intact(seg, intact: set[int] | None, footer_now: bool = True) -> bool:
    """Whether a sealed segment's bytes match the CRC32C its footer holds (one hardware CRC
    over the segment instead of a call per record; remembered in ``intact``). Not known and
    not ``footer_now``: False (its records are checked one by one)."""
    if intact is None or not seg.sealed:
        return False
    if seg.base_offset not in intact:
        if not footer_now:
            return False
        if seg.data_crc(seg.footer.data_length) != seg.footer.data_crc:
            return False   # each record is checked then, and the damaged one named
        intact.add(seg.base_offset)
    return True
