"""Reads of a tier by commit-log offset: the part of ``TieredQueueReader`` that finds a record
by where it lay in the log of the store that uploaded it (``read_at``) and scans the tier in
log order (``scan``, the queues' runs merged).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.tiered.chunk_reads import MiB, PIECE_BYTES, ChunkReads
from strata.tiered.errors import CorruptTierError
from strata.tiered.layout import chunk_path
from strata.tiered.metadata import ChunkMeta, QueueMeta, TierMetadata

PHYS_INDEX_BYTES = 64 * MiB   # chunks' record offsets kept for read_at (8 bytes a record)


@dataclass
class _Spans:
    """Every chunk's commit-log span, sorted by first_phys, for one metadata state."""

    meta: TierMetadata
    generation: int
    count: int
    first: np.ndarray                           # first_phys, ascending
    end: np.ndarray                             # end_phys, in the same order
    where: list[tuple[QueueMeta, ChunkMeta]]    # in the same order
    widest: int                                 # the longest span


class CommitLogReads(ChunkReads):
    """Reads by commit-log offset (mixed into ``TieredQueueReader``, whose ``__init__`` sets
    ``_span_cache``, ``_phys``, ``_phys_bytes`` and ``_searches``)."""

    def min_commitlog_offset(self) -> int | None:
        """The smallest commit-log offset of a record the tier holds (None: none)."""
        firsts = [q.chunks[0].first_phys for q in self._queues()]
        return min(firsts) if firsts else None

    def read_at(self, commitlog_offset: int) -> rec.StoredMessage | None:
        """The message whose record started at ``commitlog_offset`` in the log of the store
        that uploaded it; None if the tier holds no record that started there.

        The chunks whose commit-log span holds the offset (one per queue at most) come from
        sorted arrays of every chunk's span (``_spans``, rebuilt when the metadata changes).
        In each, the record is found in the chunk's sorted record offsets (``_record_phys``,
        built once a chunk has been searched often enough to pay for reading its ``.log``
        once), else by a binary search over the records' headers. The record found is read
        and checked; where no chunk has a record starting there, each candidate's record at
        or after the offset is still read and checked, as a search over headers does (a
        damaged header raises instead of hiding the record)."""
        misses = []
        for q, c in self._spanning(commitlog_offset):
            phys = self._record_phys(q, c)
            if phys is None:
                j = self._first_at_or_after(q, c, commitlog_offset)
            else:
                j = int(np.searchsorted(phys, commitlog_offset))
                if j == c.count or phys[j] != commitlog_offset:
                    misses.append((q, c, j))
                    continue
            if j < c.count:
                m = self._record(q, c, j)
                if m.commitlog_offset == commitlog_offset:
                    return m
        for q, c, j in misses:
            if j < c.count:
                m = self._record(q, c, j)
                if m.commitlog_offset == commitlog_offset:
                    return m
        return None

    def _record(self, q: QueueMeta, c: ChunkMeta, j: int) -> rec.StoredMessage:
        """The message of chunk ``c``'s unit ``j``, checked as ``_records`` checks it (lengths,
        magic, CRC32C, topic, queue, queue offset, size, commit-log offset within the chunk)
        but decoded alone, its bytes from a cached block or read as they are. Anything amiss
        goes the ``_records`` way, which names it in a CorruptTierError."""
        u = self._units(q, c)[j]
        start, size = int(u["offset"]), int(u["size"])
        path = chunk_path(q.topic, q.queue_id, c.first, "log")
        if start >= 0 and start + size <= c.log_bytes:
            buf, off = self._uncached(path, start, size)
            if len(buf) - off >= size:
                try:
                    kind, total = rec.check_record(buf, off, off + size, verify_crc=True)
                    if kind == rec.RecordKind.MESSAGE and total == size:
                        m = rec.decode_record(buf, off)
                        if m.topic == q.topic and m.queue_id == q.queue_id and \
                                m.queue_offset == c.first + j and \
                                c.first_phys <= m.commitlog_offset < c.end_phys:
                            return m
                except CorruptRecordError:
                    pass
        return self._records(q, c, j, j + 1, uncached=True)[0]

    def _spanning(self, phys: int) -> list[tuple[QueueMeta, ChunkMeta]]:
        """The chunks whose [first_phys, end_phys) holds commit-log offset ``phys``."""
        spans = self._spans()
        if not spans.where:
            return []
        hi = int(np.searchsorted(spans.first, phys, side="right"))
        lo = int(np.searchsorted(spans.first, phys - spans.widest, side="right"))
        return [spans.where[i] for i in (lo + np.flatnonzero(spans.end[lo:hi] > phys)).tolist()]

    def _spans(self) -> "_Spans":
        """Every counted chunk's commit-log span as arrays sorted by first_phys, kept while
        the metadata is the same object at the same generation and chunk count (the writer
        appends chunks before it commits them, and drops them on tier retention)."""
        meta = self.metadata
        queues = [q for q in list(meta.queues.values()) if q.chunks]
        count = sum(len(q.chunks) for q in queues)
        spans = self._span_cache
        if spans is not None and spans.meta is meta and spans.generation == meta.generation \
                and spans.count == count:
            return spans
        where = [(q, c) for q in queues for c in list(q.chunks)]
        first = np.array([c.first_phys for _q, c in where], np.int64)
        end = np.array([c.end_phys for _q, c in where], np.int64)
        order = np.argsort(first, kind="stable")
        spans = _Spans(meta, meta.generation, count, first[order], end[order],
                       [where[i] for i in order.tolist()],
                       int((end - first).max()) if len(where) else 0)
        self._span_cache = spans
        return spans

    def _record_phys(self, q: QueueMeta, c: ChunkMeta) -> np.ndarray | None:
        """Chunk ``c``'s records' commit-log offsets (from their headers, ascending), or None
        while building them would cost more than the searches so far: after the chunk's
        ``log_bytes`` / 8 MiB binary searches (at least 2), reading the whole ``.log`` once
        costs about as much as they did. Kept up to ``PHYS_INDEX_BYTES`` (least recently
        used dropped first). A chunk whose offsets are not in order (a damaged header) gets
        none: its reads search the headers and name the damage."""
        key = (q.topic, q.queue_id, c.first, c.count, c.cq_crc)
        with self._index_lock:
            phys = self._phys.get(key)
            if phys is not None:
                self._phys.move_to_end(key)
                return phys if len(phys) else None
            n = self._searches.get(key, 0) + 1
            self._searches[key] = n
            if n <= max(2, c.log_bytes // PIECE_BYTES):
                return None
        path = chunk_path(q.topic, q.queue_id, c.first, "log")
        units = self._units(q, c)
        at = units["offset"].astype(np.int64) + rec.POS_PHYSICAL_OFFSET
        phys = np.empty(c.count, np.int64)
        lo = 0
        while lo < c.count:   # a piece of at most PIECE_BYTES of the .log at a time
            hi = lo + max(1, int(np.searchsorted(at[lo:], at[lo] + PIECE_BYTES - 8,
                                                 side="right")))
            raw = np.frombuffer(self._fetch(path, int(at[lo]), int(at[hi - 1] - at[lo]) + 8),
                                np.uint8)
            rel = at[lo:hi] - at[lo]
            if len(raw) < rel[-1] + 8:
                raise CorruptTierError(f"tier {self.backend.url}: {path} is shorter than its "
                                       "units say", path)
            phys[lo:hi] = raw[rel[:, None] + np.arange(8)].copy().view("<i8")[:, 0]
            lo = hi
        ends = phys + units["size"].astype(np.int64)
        if c.count and (phys[0] != c.first_phys or ends[-1] != c.end_phys
                        or (ends[:-1] > phys[1:]).any()):
            phys = phys[:0]   # not in order: remembered as none
        with self._index_lock:
            old = self._phys.pop(key, None)   # another thread built it meanwhile
            self._phys_bytes += phys.nbytes - (old.nbytes if old is not None else 0)
            self._phys[key] = phys
            while self._phys_bytes > PHYS_INDEX_BYTES and len(self._phys) > 1:
                self._phys_bytes -= self._phys.popitem(last=False)[1].nbytes
            self._searches.pop(key, None)
        return phys if len(phys) else None

    def scan(self, from_offset: int, to_offset: int,
             batch: int = 256) -> Iterator[rec.StoredMessage]:
        """Every record the tier holds whose commit-log offset lies in [from, to), in log
        order (the queues' runs merged), each checked."""
        runs = []
        for q in self._queues():
            chunks = [c for c in list(q.chunks)
                      if c.end_phys > from_offset and c.first_phys < to_offset]
            if chunks:
                runs.append(self._scan_queue(q, chunks, from_offset, to_offset, batch))
        yield from heapq.merge(*runs, key=lambda m: m.commitlog_offset)

    def _scan_queue(self, q: QueueMeta, chunks: list[ChunkMeta], lo_phys: int, hi_phys: int,
                    batch: int) -> Iterator[rec.StoredMessage]:
        for c in chunks:
            start = 0 if c.first_phys >= lo_phys else self._first_at_or_after(q, c, lo_phys)
            for lo in range(start, c.count, batch):
                for m in self._records(q, c, lo, min(c.count, lo + batch)):
                    if m.commitlog_offset >= hi_phys:
                        return
                    yield m
