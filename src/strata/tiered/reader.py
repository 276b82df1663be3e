"""Reading a queue's history back from the tier alone, every record's CRC checked.

``TieredQueueReader`` needs only a backend and the metadata (the local file or the tier's own
copy, so a tier can be read without the store that wrote it). Record bytes come through a
bounded block cache; a chunk's .cq and .keys objects are checked against the CRCs in the
metadata, every record by the local reader's compiled pass (``read_kernels.check_units``:
lengths, magic, its own CRC, queue id, offset, topic, size) over the cached bytes, and read
records come back as a lazy ``MessageBatch``. Damaged bytes raise CorruptTierError naming
the object (``read`` names each damaged record instead); they are never returned.
"""

from __future__ import annotations

import bisect
import heapq
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
from crc32c import crc32c

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.format import record_table as rk
from strata.format.consume_queue import UNIT_DTYPE
from strata.format.record_batch import MessageBatch, join_batches
from strata.log.record_walk import scratch
from strata.store import time_search
from strata.tiered.backend import TierBackend
from strata.tiered.cache import BlockCache
from strata.tiered.errors import CorruptTierError
from strata.tiered.layout import KEY_ENTRY, chunk_path, key_hash
from strata.tiered.metadata import ChunkMeta, QueueMeta, TierMetadata, read_tier

MiB = 1 << 20
MAX_INDEX_OBJECTS = 256   # verified .cq/.keys arrays kept in memory
PIECE_BYTES = 8 * MiB     # .log bytes checked in one piece (a longer read takes several)
PHYS_INDEX_BYTES = 64 * MiB   # chunks' record offsets kept for read_at (8 bytes a record)
_NO_FIELDS = np.zeros((rk.FIELDS, 0), np.int64)


def _read_kernels():
    """``strata.tiered.read_kernels``, imported (numba, compiled code) on the first read."""
    from strata.tiered import read_kernels
    return read_kernels


@dataclass
class TierRead:
    """What ``TieredQueueReader.read`` found at a run of a queue's offsets."""

    messages: MessageBatch                 # the intact records, in offset order
    damaged: list[tuple[int, str]]         # (queue offset, why) of records failing checks
    next_offset: int                       # the offset after the last unit looked at


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


class TieredQueueReader:
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

    # ------------------------------------------------------------------ objects

    def _fetch(self, path: str, start: int, length: int) -> bytes:
        try:
            return self.backend.read(path, start, length)
        except FileNotFoundError:
            raise CorruptTierError(f"tier {self.backend.url}: object {path} is missing "
                                   "although the metadata counts it", path) from None

    def _array(self, path: str, crc: int, count: int, dtype: np.dtype) -> np.ndarray:
        with self._index_lock:   # a store's reads come from many threads (the broker's)
            arr = self._index.get(path)
            if arr is not None:
                self._index.move_to_end(path)
                return arr
        raw = self._fetch(path, 0, count * dtype.itemsize + 1)
        if len(raw) != count * dtype.itemsize:
            raise CorruptTierError(f"tier {self.backend.url}: {path} holds {len(raw)} bytes, "
                                   f"the metadata says {count * dtype.itemsize}", path)
        if crc32c(raw) != crc:
            raise CorruptTierError(f"tier {self.backend.url}: {path} fails its CRC32C "
                                   f"(metadata 0x{crc:08x}, computed 0x{crc32c(raw):08x})", path)
        arr = np.frombuffer(raw, dtype)
        with self._index_lock:
            self._index[path] = arr
            while len(self._index) > MAX_INDEX_OBJECTS:
                self._index.popitem(last=False)
        return arr

    def _units(self, q: QueueMeta, c: ChunkMeta) -> np.ndarray:
        return self._array(chunk_path(q.topic, q.queue_id, c.first, "cq"), c.cq_crc, c.count,
                           UNIT_DTYPE)

    def _keys(self, q: QueueMeta, c: ChunkMeta) -> np.ndarray:
        if not c.keys_count:
            return np.empty(0, KEY_ENTRY)
        return self._array(chunk_path(q.topic, q.queue_id, c.first, "keys"), c.keys_crc,
                           c.keys_count, KEY_ENTRY)

    def _chunk_at(self, q: QueueMeta, offset: int) -> ChunkMeta | None:
        chunks = list(q.chunks)   # tier retention may drop the first ones meanwhile
        i = bisect.bisect_right([c.first for c in chunks], offset) - 1
        if i < 0 or offset >= chunks[i].end:
            return None
        return chunks[i]

    def _first_at_or_after(self, q: QueueMeta, c: ChunkMeta, phys: int) -> int:
        """Index of chunk ``c``'s first record at commit-log offset ``phys`` or after it
        (``c.count`` if none): records of a queue lie in log order. A binary search over the
        offsets in the records' headers (not yet checked: search keys; the record found is
        checked when read)."""
        at = self._units(q, c)["offset"]
        path = chunk_path(q.topic, q.queue_id, c.first, "log")
        read, fetch, unpack = self.cache.read, self._fetch, rec.I64_AT.unpack
        lo, hi = 0, c.count
        while lo < hi:
            mid = (lo + hi) // 2
            raw = read(path, int(at[mid]) + rec.POS_PHYSICAL_OFFSET, 8, fetch)
            if len(raw) != 8:
                raise CorruptTierError(f"tier {self.backend.url}: {path} is shorter than its "
                                       "units say", path)
            if unpack(raw)[0] < phys:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _piece_end(self, units: np.ndarray, lo: int, hi: int) -> int:
        """The end of the piece of units [lo, hi) that starts at ``lo``: at most PIECE_BYTES
        of the .log object (at least one unit)."""
        if hi - lo <= 1 or int(units["offset"][hi - 1]) - int(units["offset"][lo]) < PIECE_BYTES:
            return hi
        cut = int(np.searchsorted(units["offset"][lo:hi], units["offset"][lo] + PIECE_BYTES))
        return lo + max(1, cut)

    def _check(self, q: QueueMeta, c: ChunkMeta, lo: int, hi: int,
               tag_hashes: np.ndarray | None = None, uncached: bool = False
               ) -> tuple[MessageBatch, list[tuple[int, str]]]:
        """The records of chunk ``c``'s units [lo, hi) (with ``tag_hashes``: only those whose
        unit's tag hash is one of them) checked in one compiled pass: the intact ones as a
        MessageBatch, and (queue offset, message naming the object, offset, byte and what is
        wrong) of each that fails its checks. Objects missing, short or of bad units raise
        CorruptTierError. ``uncached``: bytes no cached block holds are read as they are, not
        as whole blocks into the cache (``read_at``'s single records, which have no neighbours
        to share a block with)."""
        units = self._units(q, c)[lo:hi]
        qoffs = np.arange(c.first + lo, c.first + hi, dtype=np.int64)
        offsets = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        if tag_hashes is not None:
            keep = np.flatnonzero(np.isin(units["tag"], tag_hashes))
            offsets, sizes, qoffs = offsets[keep], sizes[keep], qoffs[keep]
        n = len(offsets)
        if n == 0:
            return MessageBatch(b"", _NO_FIELDS, q.topic, self._topics), []
        start = int(offsets[0])
        end = int(offsets[-1] + sizes[-1])
        path = chunk_path(q.topic, q.queue_id, c.first, "log")
        if start < 0 or end > c.log_bytes:
            raise CorruptTierError(f"tier {self.backend.url}: {path}: units point outside "
                                   f"the object ({start}..{end} of {c.log_bytes} bytes)", path)
        if uncached:
            buf, off = self._uncached(path, start, end - start)
        else:
            buf, off = self.cache.view(path, start, end - start, self._fetch)
        if len(buf) - off < end - start:
            raise CorruptTierError(f"tier {self.backend.url}: {path} is shorter than the "
                                   f"metadata says ({start + len(buf) - off} < {end} bytes)",
                                   path)
        data = np.frombuffer(buf, np.uint8)
        fields = scratch("tier_fields", (rk.FIELDS, n), np.int64)
        status = np.empty(n, np.uint8)
        good, nbytes = _read_kernels().check_units(
            data, offsets, sizes, off - start, c.first_phys, c.end_phys,
            np.frombuffer(q.topic.encode("ascii"), np.uint8), q.queue_id, qoffs,
            scratch("tier_pos", (n,), np.int64), scratch("tier_phys", (n,), np.int64),
            fields, status)
        damaged = []
        for i in ([] if good == n else np.flatnonzero(status != rk.GOOD).tolist()):
            o = int(qoffs[i])
            why = self._why(q, c, data, fields[:, i], int(status[i]), o, int(sizes[i]))
            damaged.append((o, f"tier {self.backend.url}: {path}: the record of {q.topic}/"
                               f"{q.queue_id} offset {o} (byte {int(offsets[i])}) {why}"))
        if good == n and 2 * nbytes >= len(buf):   # the records fill most of the buffer:
            return MessageBatch(buf, fields.copy(), q.topic, self._topics), damaged  # no copy
        out = scratch("tier_bytes", (nbytes,), np.uint8)
        rk.kernels().pack(data, fields, status, out)
        return MessageBatch(out.tobytes(), fields[:, :good].copy(), q.topic,
                            self._topics), damaged

    def _uncached(self, path: str, start: int, length: int) -> tuple[bytes, int]:
        """``(buf, off)`` as ``BlockCache.view``, from a cached block that holds all of the
        bytes, else read as they are (not as whole blocks into the cache)."""
        return self.cache.cached_view(path, start, length) or \
            (self._fetch(path, start, length), 0)

    @staticmethod
    def _why(q: QueueMeta, c: ChunkMeta, data: np.ndarray, f: np.ndarray, status: int,
             offset: int, size: int) -> str:
        """What is wrong with the record of queue offset ``offset`` (its status from
        ``check_units``, its fields ``f``, its unit's size ``size``)."""
        if status == rk.CRC_MISMATCH:
            return "fails its checks (CRC32C)"
        if status == rk.NO_RECORD:
            return "fails its checks (no whole record there: length, magic or field lengths)"
        topic = bytes(data[f[rk.F_TOPIC_AT]:f[rk.F_PROPS_AT]]).decode("ascii", "replace")
        if topic != q.topic or f[rk.F_QUEUE_ID] != q.queue_id or \
                f[rk.F_QUEUE_OFFSET] != offset:
            return f"holds {topic}/{int(f[rk.F_QUEUE_ID])} offset {int(f[rk.F_QUEUE_OFFSET])}"
        if f[rk.F_TOTAL] != size:
            return f"is {int(f[rk.F_TOTAL])} bytes, its unit says {size}"
        return (f"carries commit-log offset {int(f[rk.F_PHYS])}, outside the chunk's "
                f"{c.first_phys}..{c.end_phys}")

    def _records(self, q: QueueMeta, c: ChunkMeta, lo: int, hi: int,
                 uncached: bool = False) -> MessageBatch:
        """Messages at positions [lo, hi) of chunk ``c``, each checked; the first that fails
        its checks raises CorruptTierError naming it. ``uncached``: as ``_check``."""
        batch, damaged = self._check(q, c, lo, hi, uncached=uncached)
        if damaged:
            raise CorruptTierError(damaged[0][1], chunk_path(q.topic, q.queue_id, c.first, "log"))
        return batch

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
