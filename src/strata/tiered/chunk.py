"""Build one chunk of a queue from the local store's bytes (the upload's pure-ish half).

Given the queue's consume-queue units and the commit log, a chunk is the records of a run of
consecutive queue offsets copied verbatim, their units re-pointed at positions inside the
chunk, and key entries for ``topic#key`` lookups. Every record is checked (lengths, offsets,
CRC) before it is copied: damaged local bytes are never uploaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from strata.errors import CorruptRecordError
from strata.files.segment_queue import segment_runs
from strata.format import record as rec
from strata.format.consume_queue import UNIT_DTYPE
from strata.format.record_batch import check_headers
from strata.format.segment import HEADER_AREA
from strata.log.commit_log import CommitLog
from strata.tiered.layout import KEY_ENTRY, key_hash, sort_keys
from strata.tiered.metadata import ChunkMeta


@dataclass
class Chunk:
    """The three objects of a chunk and its metadata entry."""

    log: bytes
    cq: bytes
    keys: bytes
    meta: ChunkMeta


def build_chunk(log: CommitLog, topic: str, queue_id: int, first: int,
                units: np.ndarray) -> Chunk:
    """The chunk of queue offsets [first, first + len(units)) whose local units are ``units``
    (all real, ascending commit-log offsets). CorruptRecordError names a damaged record;
    ValueError if a segment was closed meanwhile (retention): the caller tries again later."""
    phys = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    n = len(units)
    parts: list = []
    store_ts = np.empty(n, np.int64)
    keys: list[tuple[int, int, int]] = []
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
        # where each record's properties start, relative to the record
        props_at = rec.HEADER_SIZE + hosts + hdr["topic_len"].astype(np.int64)
        rows = zip(pos.tolist(), sizes[lo:hi].tolist(), hdr["crc"].tolist(), ok.tolist(),
                   props_at.tolist(), hdr["props_len"].tolist(), hdr["store_ts"].tolist())
        add = parts.append
        for i, (p, s, crc, good, pa, pl, ts) in enumerate(rows):
            piece = mm[p:p + s]
            if not good or crc32c(memoryview(piece)[rec.CRC_START:]) != crc:
                raise CorruptRecordError(
                    f"{topic}/{queue_id} offset {first + lo + i}: the record at commit-log "
                    f"offset {int(phys[lo + i])} is damaged; not uploaded", int(phys[lo + i]))
            add(piece)
            if pl:
                k, _tags, uniq = rec.dispatch_properties(piece[pa:pa + pl])
                for key in (*k, uniq) if uniq else k:
                    keys.append((key_hash(topic, key), ts, first + lo + i))
        store_ts[lo:hi] = hdr["store_ts"]
    data = b"".join(parts)
    cq = np.empty(n, UNIT_DTYPE)
    cq["size"] = sizes
    cq["offset"] = np.concatenate(([0], np.cumsum(sizes)[:-1])) if n else []
    cq["tag"] = units["tag"]
    cq_bytes = cq.tobytes()
    key_arr = sort_keys(np.array(keys, KEY_ENTRY)) if keys else np.empty(0, KEY_ENTRY)
    key_bytes = key_arr.tobytes()
    meta = ChunkMeta(first=first, count=n, log_bytes=len(data), cq_crc=crc32c(cq_bytes),
                     keys_count=len(key_arr), keys_crc=crc32c(key_bytes) if keys else 0,
                     min_ts=int(store_ts.min()), max_ts=int(store_ts.max()),
                     first_phys=int(phys[0]), end_phys=int(phys[-1] + sizes[-1]))
    return Chunk(data, cq_bytes, key_bytes, meta)
