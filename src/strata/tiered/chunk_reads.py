"""Checked reads of one tier chunk's objects: the part of ``TieredQueueReader`` below its
queries.

``ChunkReads`` fetches a chunk's ``.cq`` and ``.keys`` objects (checked against the CRCs in the
metadata, kept verified in memory) and its ``.log`` bytes through the reader's block cache, and
checks a run of records in one compiled pass (``read_kernels.check_units``); damaged bytes
raise CorruptTierError naming the object, or are named record by record, never returned.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict

import numpy as np
from crc32c import crc32c

from strata.format import record as rec
from strata.format import record_table as rk
from strata.format.consume_queue import UNIT_DTYPE
from strata.format.record_batch import MessageBatch
from strata.log.record_walk import scratch
from strata.tiered.backend import TierBackend
from strata.tiered.cache import BlockCache
from strata.tiered.errors import CorruptTierError
from strata.tiered.layout import KEY_ENTRY, chunk_path
from strata.tiered.metadata import ChunkMeta, QueueMeta

MiB = 1 << 20
MAX_INDEX_OBJECTS = 256   # verified .cq/.keys arrays kept in memory
PIECE_BYTES = 8 * MiB     # .log bytes checked in one piece (a longer read takes several)
_NO_FIELDS = np.zeros((rk.FIELDS, 0), np.int64)


def _read_kernels():
    """``strata.tiered.read_kernels``, imported (numba, compiled code) on the first read."""
    from strata.tiered import read_kernels
    return read_kernels


class ChunkReads:
    """A chunk's objects, fetched, checked and decoded (mixed into ``TieredQueueReader``,
    whose ``__init__`` sets the state used here)."""

    backend: TierBackend
    cache: BlockCache
    _index: OrderedDict[str, np.ndarray]
    _index_lock: threading.Lock
    _topics: dict[bytes, str]

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
