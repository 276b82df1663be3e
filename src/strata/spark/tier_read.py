"""Batch reads of tiered history: a topic's whole history (the tier's chunks below the local
store's first offset, the local files from there on) or a tier alone (``tierUrl``: no store
directory at all).

Planning sees one ``History`` per read: per queue the offsets the tier and the store hold
together, and where the local part starts. A queue range is cut there; its tier part becomes
one piece per chunk (``TierSpan``), so a task reads only its own queue's objects. Executors
fetch a span's ``.cq`` object and the ``.log`` bytes it covers, check them in bulk
(tiered.chunk_check: sizes, CRCs, topic, queue, offsets) and decode them with the same kernels
as local reads (decode.Records.from_buffer), never handing out a damaged record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from strata.spark.options import OptionError, ReadOptions
from strata.spark.planning import QueueRange


@dataclass(frozen=True)
class TierSpan:
    """Queue offsets [start, end) of one chunk (the chunk's own numbers, so an executor needs
    no metadata)."""

    topic: str
    queue_id: int
    first: int        # the chunk's first offset (its object names)
    count: int
    log_bytes: int
    cq_crc: int
    start: int
    end: int


def open_tier(url: str, endpoint: str | None):
    """The backend of a tier that is only read: a POSIX tier's directory must exist already
    (opening it for writing would create it). TierError naming the URL otherwise."""
    from strata.store.tier_url import parse_tier_url
    from strata.tiered.connect import open_backend
    from strata.tiered.errors import TierError

    loc = parse_tier_url(url)
    if loc.scheme == "file" and not Path(loc.root).is_dir():
        raise TierError(f"{loc.url} holds no strata tier (no such directory)")
    return open_backend(loc, endpoint)


class History:
    """What a read sees of each queue: the tier (metadata ``meta``, read through ``reader``)
    and/or the local store (``store``, read-only), as one run of offsets."""

    def __init__(self, store, meta, reader, tier_url: str | None,
                 tier_endpoint: str | None) -> None:
        self.store = store
        self.meta = meta
        self.reader = reader
        self.tier_url = tier_url
        self.tier_endpoint = tier_endpoint
        self.path = store.path if store is not None else tier_url

    @classmethod
    def open(cls, o: ReadOptions) -> "History":
        """The history ``o`` names: a tier alone (``tierUrl``), or a store with the tier its
        ``tiered/`` metadata names (if it has one)."""
        from strata.tiered.errors import TierError
        from strata.tiered.metadata import read_local, read_tier
        from strata.tiered.reader import TieredQueueReader

        if o.tier_url is not None:
            try:
                backend = open_tier(o.tier_url, o.tier_endpoint_url)
            except TierError as exc:
                raise OptionError("tierUrl", str(exc)) from None
            try:
                meta, _ = read_tier(backend)
            except TierError as exc:
                backend.close()
                raise OptionError("tierUrl", f"cannot read the tier's metadata: {exc}") \
                    from None
            if meta is None:
                backend.close()
                raise OptionError("tierUrl", f"{o.tier_url} holds no strata tier (no "
                                             "meta/tier.json)")
            return cls(None, meta, TieredQueueReader(backend, meta), o.tier_url,
                       o.tier_endpoint_url)
        from strata.spark.geometry import open_readonly
        store = open_readonly(o.path)
        try:
            meta = read_local(Path(o.path))
        except Exception:
            store.close()
            raise
        if meta is None or not any(q.chunks for q in meta.queues.values()):
            return cls(store, None, None, None, None)
        return cls(store, meta, TieredQueueReader(open_tier(meta.tier_url, meta.endpoint_url),
                                                  meta), meta.tier_url, meta.endpoint_url)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        if self.reader is not None:
            self.reader.backend.close()

    # ------------------------------------------------------------------ the store's API

    def topics(self) -> list[str]:
        names = set(self.store.topics()) if self.store is not None else set()
        if self.meta is not None:
            names.update(q.topic for q in self.meta.queues.values())
        return sorted(names)

    def queue_count(self, topic: str) -> int:
        n = self.store.queue_count(topic) if self.store is not None else 0
        if self.meta is not None:
            n = max([n] + [q.queue_id + 1 for q in self.meta.queues.values()
                           if q.topic == topic])
        return n

    def _tier_queue(self, topic: str, queue_id: int):
        q = self.meta.queue(topic, queue_id) if self.meta is not None else None
        return q if q is not None and q.chunks else None

    def _local(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """The local queue's (min, max) offsets; None without a store or such a queue."""
        if self.store is None:
            return None
        cq = self.store.queues.get(topic, queue_id) if queue_id < self.store.queue_count(
            topic) else None
        if cq is None:
            return None
        return self.store.min_offset(topic, queue_id), cq.max_offset()

    def local_start(self, topic: str, queue_id: int) -> int:
        """The first offset read locally: everything below it comes from the tier."""
        local = self._local(topic, queue_id)
        if local is None:
            q = self._tier_queue(topic, queue_id)
            return q.max_offset() if q is not None else 0
        return local[0]

    def min_offset(self, topic: str, queue_id: int) -> int:
        local, q = self._local(topic, queue_id), self._tier_queue(topic, queue_id)
        if q is None:
            return local[0] if local else 0
        return q.min_offset() if local is None else min(q.min_offset(), local[0])

    def max_offset(self, topic: str, queue_id: int) -> int:
        local, q = self._local(topic, queue_id), self._tier_queue(topic, queue_id)
        if q is None:
            return local[1] if local else 0
        return q.max_offset() if local is None else max(q.max_offset(), local[1])

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int,
                        boundary: str = "lower") -> int:
        local, q = self._local(topic, queue_id), self._tier_queue(topic, queue_id)
        if q is None:
            return self.store.offset_for_time(topic, queue_id, timestamp_ms, boundary) \
                if local else 0
        tiered_below = local is None or q.min_offset() < local[0]
        if not tiered_below or (local is not None and local[1] > local[0]
                                and timestamp_ms > q.chunks[-1].max_ts):
            return self.store.offset_for_time(topic, queue_id, timestamp_ms, boundary)
        return self.reader.offset_for_time(topic, queue_id, timestamp_ms, boundary)

    # ------------------------------------------------------------------ planning

    def split(self, r: QueueRange, fail_on_data_loss: bool
              ) -> tuple[list[TierSpan], QueueRange]:
        """``r`` cut into its tier part (one span per chunk it touches) and its local part
        (possibly empty). Offsets neither holds (deleted locally before they were uploaded)
        are an OptionError unless ``fail_on_data_loss`` is false (then skipped)."""
        cut = max(r.start, min(r.end, self.local_start(r.topic, r.queue_id)))
        spans: list[TierSpan] = []
        at = r.start
        q = self._tier_queue(r.topic, r.queue_id)
        for c in (q.chunks if q is not None and r.start < cut else ()):
            lo, hi = max(at, c.first), min(cut, c.end)
            if lo >= hi:
                continue
            if lo > at:
                self._lost(r, at, lo, fail_on_data_loss)
            spans.append(TierSpan(r.topic, r.queue_id, c.first, c.count, c.log_bytes,
                                  c.cq_crc, lo, hi))
            at = hi
        if at < cut:
            self._lost(r, at, cut, fail_on_data_loss)
        return spans, QueueRange(r.topic, r.queue_id, cut, r.end)

    def _lost(self, r: QueueRange, lo: int, hi: int, fail_on_data_loss: bool) -> None:
        if fail_on_data_loss:
            raise OptionError("failOnDataLoss",
                              f"{r.topic}/{r.queue_id} offsets {lo}..{hi - 1} are neither on "
                              "the tier nor stored locally (deleted before they were "
                              "uploaded); failOnDataLoss=false skips them")


def pack_spans(spans: list[TierSpan], max_rows: int, one_each: bool) -> list[list[TierSpan]]:
    """Tasks of spans in order, up to ``max_rows`` offsets each (a span is never cut: a task
    fetches whole spans of the queues it reads, nothing of any other queue); ``one_each``: a
    task per span. Every Python task costs tens of ms, so small chunks share one."""
    tasks: list[list[TierSpan]] = []
    rows = 0
    for s in spans:
        if one_each or not tasks or rows + (s.end - s.start) > max_rows:
            tasks.append([])
            rows = 0
        tasks[-1].append(s)
        rows += s.end - s.start
    return tasks


# ---------------------------------------------------------------------- executors

def read_spans(url: str, endpoint: str | None, spans, schema, batch_rows: int,
               tag_hashes=None) -> Iterator:
    """The record batches of tier spans (pyarrow RecordBatches of ``schema``), each batch at
    most ``batch_rows`` messages of one span, every record checked before it is decoded; with
    ``tag_hashes``, only messages whose unit's tag hash is one of them."""
    from strata.format.record_table import F_PHYS
    from strata.spark.decode import Records, build_batch
    from strata.tiered.chunk_check import check_records, check_units
    from strata.tiered.layout import chunk_path
    from strata.tiered.metadata import ChunkMeta

    wanted = None if tag_hashes is None else np.array(sorted(tag_hashes), np.int64)
    backend = open_tier(url, endpoint)
    try:
        for s in spans:
            cq_path = chunk_path(s.topic, s.queue_id, s.first, "cq")
            log_path = chunk_path(s.topic, s.queue_id, s.first, "log")
            c = ChunkMeta(s.first, s.count, s.log_bytes, s.cq_crc, 0, 0, 0, 0, 0, 0)
            units = check_units(_fetch(backend, cq_path, 0, s.count * 20 + 1), c,
                                f"{backend.url}/{cq_path}")
            queues = None
            for lo in range(s.start - s.first, s.end - s.first, batch_rows):
                hi = min(s.end - s.first, lo + batch_rows)
                u = units[lo:hi]
                start = int(u["offset"][0])
                end = int(u["offset"][-1] + u["size"][-1])
                raw = _fetch(backend, log_path, start, end - start)
                where = f"{backend.url}/{log_path}"
                if len(raw) != end - start:
                    from strata.tiered.errors import CorruptTierError
                    raise CorruptTierError(f"{where} is shorter than the metadata says "
                                           f"({start + len(raw)} < {end} bytes)", where)
                pos = u["offset"] - start
                phys = check_records(raw, pos, u["size"], s.topic, s.queue_id, s.first + lo,
                                     where, base=start)[F_PHYS]
                keep = None if wanted is None else np.isin(u["tag"], wanted)
                if keep is not None:
                    pos, phys = pos[keep], phys[keep]
                if not len(pos):
                    continue
                records = Records.from_buffer(np.frombuffer(raw, np.uint8), pos, phys,
                                              verify_crc=False)   # check_records did
                if queues is None or len(queues) != len(pos):
                    queues = np.full(len(pos), s.queue_id, np.int32)
                yield build_batch(records, [s.topic], None, queues, schema)
    finally:
        backend.close()


def _fetch(backend, path: str, start: int, length: int) -> bytes:
    from strata.tiered.errors import CorruptTierError
    try:
        return backend.read(path, start, length)
    except FileNotFoundError:
        raise CorruptTierError(f"tier {backend.url}: object {path} is missing although the "
                               "metadata counts it", path) from None
