"""Reading a queue's history back from the tier alone, every record's CRC checked.

``TieredQueueReader`` needs only a backend and the metadata (the local file or the tier's own
copy, so a tier can be read without the store that wrote it). Record bytes come through a
bounded block cache; a chunk's .cq and .keys objects are checked against the CRCs in the
metadata, every record by the local reader's compiled pass (``read_kernels.check_units``:
lengths, magic, its own CRC, queue id, offset, topic, size) over the cached bytes, and read
records come back as a lazy ``MessageBatch``. Damaged bytes raise CorruptTierError naming
the object (``read`` names each damaged record instead); they are never returned.

The chunk objects' fetching and checking live in ``chunk_reads`` (``ChunkReads``), the reads
by commit-log offset (``read_at``, ``scan``) in ``offset_reads`` (``CommitLogReads``); the
reader mixes both in.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from strata.format import record as rec
from strata.format.record_batch import MessageBatch, join_batches
from strata.store import time_search
from strata.tiered.backend import TierBackend
from strata.tiered.cache import BlockCache
from strata.tiered.chunk_reads import MiB
from strata.tiered.errors import CorruptTierError
from strata.tiered.layout import chunk_path, key_hash
from strata.tiered.metadata import ChunkMeta, QueueMeta, TierMetadata, read_tier
from strata.tiered.offset_reads import CommitLogReads, _Spans


@dataclass
class TierRead:
    """What ``TieredQueueReader.read`` found at a run of a queue's offsets."""

    messages: MessageBatch                 # the intact records, in offset order
    damaged: list[tuple[int, str]]         # (queue offset, why) of records failing checks
    next_offset: int                       # the offset after the last unit looked at


@dataclass
class VerifyReport:
    """What ``verify`` found: totals and one line per problem."""

    chunks: int = 0
    messages: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class TieredQueueReader(CommitLogReads):
    """Answers reads of tiered queues: get, min/max offset, earliest time, time and key
    lookups, verification."""

    def __init__(self, backend: TierBackend,
                 metadata: TierMetadata | Callable[[], TierMetadata], *,
                 cache_bytes: int = 64 * MiB, block_size: int = 2 * MiB) -> None:
        self.backend = backend
        self._metadata = metadata if callable(metadata) else (lambda: metadata)
        self.cache = BlockCache(cache_bytes, block_size)
        self._index: OrderedDict[str, np.ndarray] = OrderedDict()
        self._index_lock = threading.Lock()
        self._topics: dict[bytes, str] = {}
        self._span_cache: _Spans | None = None
        self._phys: OrderedDict[tuple, np.ndarray] = OrderedDict()   # see _record_phys
        self._phys_bytes = 0
        self._searches: dict[tuple, int] = {}

    @classmethod
    def from_tier(cls, backend: TierBackend, **kw) -> "TieredQueueReader":
        """A reader of the metadata copy on the tier itself (no store directory needed)."""
        meta, _v = read_tier(backend)
        if meta is None:
            raise CorruptTierError(f"tier {backend.url} holds no metadata (meta/tier.json)")
        return cls(backend, meta, **kw)

    def close(self) -> None:
        """Release the backend (a read-only opener's own; the writer's service closes its)."""
        self.backend.close()

    @property
    def metadata(self) -> TierMetadata:
        return self._metadata()

    def _queue(self, topic: str, queue_id: int) -> QueueMeta | None:
        q = self.metadata.queue(topic, queue_id)
        return q if q is not None and q.chunks else None

    def _queues(self) -> list[QueueMeta]:
        """The queues with chunks (a snapshot: the writer's uploads change the metadata)."""
        return [q for q in list(self.metadata.queues.values()) if q.chunks]

    def holds(self, topic: str, queue_id: int) -> bool:
        """Whether the tier holds at least one message of the queue."""
        return self._queue(topic, queue_id) is not None

    # ------------------------------------------------------------------ offsets and times

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset the tier holds (= max_offset if it holds none of the
        queue: 0 for a queue never uploaded)."""
        q = self.metadata.queue(topic, queue_id)
        return q.min_offset() if q else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last queue offset the tier holds (0 for a queue never uploaded)."""
        q = self.metadata.queue(topic, queue_id)
        return q.max_offset() if q else 0

    def next_held(self, topic: str, queue_id: int, offset: int) -> int:
        """The first offset at or after ``offset`` that the tier holds (its max_offset if
        none): past a stretch local retention deleted before it was uploaded."""
        q = self._queue(topic, queue_id)
        if q is None:
            return self.max_offset(topic, queue_id)
        for c in list(q.chunks):
            if c.end > offset:
                return max(c.first, offset)
        return q.max_offset()

    def earliest_time(self, topic: str, queue_id: int) -> int:
        """Store time (ms) of the oldest message the tier holds of the queue; -1 if none."""
        q = self._queue(topic, queue_id)
        chunks = list(q.chunks) if q else []
        return chunks[0].min_ts if chunks else -1

    # ------------------------------------------------------------------ reads

    def read(self, topic: str, queue_id: int, offset: int, count: int,
             tag_hashes: np.ndarray | None = None) -> TierRead:
        """The queue's messages at offsets [offset, offset + count) as far as the tier holds
        them without a gap (with ``tag_hashes``: only those whose unit's tag hash is one of
        them), every record checked: the intact ones, and each damaged one named (never
        served). Objects missing or damaged as a whole raise CorruptTierError."""
        q = self._queue(topic, queue_id)
        batches: list[MessageBatch] = []
        damaged: list[tuple[int, str]] = []
        for c, lo, hi in self._pieces(q, offset, offset + count):
            batch, bad = self._check(q, c, lo, hi, tag_hashes)
            damaged += bad
            if len(batch):
                batches.append(batch)
            offset = c.first + hi
        return TierRead(self._joined(batches, topic), damaged, offset)

    def _pieces(self, q: QueueMeta | None, offset: int,
                end: int) -> Iterator[tuple[ChunkMeta, int, int]]:
        """(chunk, lo, hi): the queue's offsets [offset, end) as far as the tier holds them
        without a gap, as pieces of one chunk's units [lo, hi) each (``_piece_end``)."""
        while q is not None and offset < end:
            c = self._chunk_at(q, offset)
            if c is None:
                return
            lo = offset - c.first
            hi = self._piece_end(self._units(q, c), lo, min(c.count, end - c.first))
            yield c, lo, hi
            offset = c.first + hi

    def _joined(self, batches: list[MessageBatch], topic: str) -> MessageBatch:
        if len(batches) == 1:
            return batches[0]
        return join_batches(batches, topic, self._topics)

    def get(self, topic: str, queue_id: int, offset: int,
            max_messages: int = 32) -> MessageBatch:
        """Up to ``max_messages`` messages of the queue from ``offset`` (fewer at the end of
        the tiered range; none if the tier does not hold ``offset``); a record that fails its
        checks raises CorruptTierError naming it."""
        q = self._queue(topic, queue_id)
        batches = [self._records(q, c, lo, hi)
                   for c, lo, hi in self._pieces(q, offset, offset + max_messages)]
        return self._joined(batches, topic)

    def _store_time(self, q: QueueMeta, c: ChunkMeta, i: int) -> int:
        u = self._units(q, c)[i]
        path = chunk_path(q.topic, q.queue_id, c.first, "log")
        raw = self.cache.read(path, int(u["offset"]) + rec.POS_STORE_TIMESTAMP, 8, self._fetch)
        return rec.I64_AT.unpack(raw)[0]

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int,
                        boundary: str = "lower") -> int:
        """As ``MessageStore.offset_for_time`` over the tiered range: ``lower`` = first
        message stored at or after the time, ``upper`` = last one at or before it."""
        q = self._queue(topic, queue_id)
        if q is None:
            return 0
        chunks = list(q.chunks)
        if boundary == "lower":
            i = next((i for i, c in enumerate(chunks) if c.max_ts >= timestamp_ms), None)
            if i is None:
                return chunks[-1].end
        else:
            i = next((i for i in range(len(chunks) - 1, -1, -1)
                      if chunks[i].min_ts <= timestamp_ms), None)
            if i is None:
                return chunks[0].first
        c = chunks[i]
        return time_search.offset_for_time(c.first, c.first + c.count,
                                           lambda o: self._store_time(q, c, o - c.first),
                                           timestamp_ms, boundary)

    def query(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
              max_results: int = 64, below: int | None = None) -> list[rec.StoredMessage]:
        """Messages of ``topic`` with key (or unique key) ``key`` stored in [begin, end] ms,
        newest first; only exact topic and key matches (hashes are compared, then the
        records themselves). ``below``: only chunks that start below this commit-log offset
        are looked at (a store asks only for what its local files no longer hold)."""
        if end_ms is None:
            end_ms = 2**62
        h = np.uint64(key_hash(topic, key))
        found: list[rec.StoredMessage] = []
        for q in self._queues():
            if q.topic != topic:
                continue
            for c in list(q.chunks):
                if c.max_ts < begin_ms or c.min_ts > end_ms or not c.keys_count or \
                        (below is not None and c.first_phys >= below):
                    continue
                keys = self._keys(q, c)
                a = int(np.searchsorted(keys["hash"], h, side="left"))
                b = int(np.searchsorted(keys["hash"], h, side="right"))
                hits = keys[a:b]
                hits = hits[(hits["store_ts"] >= begin_ms) & (hits["store_ts"] <= end_ms)]
                for off in sorted(set(hits["offset"].tolist())):
                    m = self._records(q, c, off - c.first, off - c.first + 1)[0]
                    if key in m.keys or m.properties.get(rec.PROP_UNIQ_KEY) == key:
                        found.append(m)
        found.sort(key=lambda m: (m.store_timestamp, m.commitlog_offset), reverse=True)
        return found[:max_results]

    # ------------------------------------------------------------------ by commit-log offset

    # ------------------------------------------------------------------ verification

    def verify(self, on_chunk: Callable[[int], None] | None = None) -> VerifyReport:
        """Check every chunk the metadata counts: objects present and of the counted sizes,
        .cq and .keys CRCs, every record's checks and CRC, offsets in order."""
        report = VerifyReport()
        for q in sorted(self.metadata.queues.values(), key=lambda q: (q.topic, q.queue_id)):
            expect = q.chunks[0].first if q.chunks else 0
            for c in q.chunks:
                report.chunks += 1
                if c.first != expect:
                    report.problems.append(f"{q.topic}/{q.queue_id}: chunk at offset {c.first} "
                                           f"does not follow the previous one (ends {expect})")
                expect = c.end
                try:
                    size = self.backend.size(chunk_path(q.topic, q.queue_id, c.first, "log"))
                    if size != c.log_bytes:
                        raise CorruptTierError(
                            f"tier {self.backend.url}: "
                            f"{chunk_path(q.topic, q.queue_id, c.first, 'log')} holds "
                            f"{size} bytes, the metadata says {c.log_bytes}")
                    self._keys(q, c)
                    step = 4096
                    for lo in range(0, c.count, step):
                        self._records(q, c, lo, min(c.count, lo + step))
                except CorruptTierError as exc:
                    report.problems.append(str(exc))
                else:
                    report.messages += c.count
                    report.bytes += c.log_bytes
                if on_chunk is not None:
                    on_chunk(c.log_bytes)
        return report
