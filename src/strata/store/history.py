"""The one place that stitches a store's history from its local files and its tier.

``QueueHistory`` answers a queue's reads over ``LocalQueue`` and, when the tier holds messages
below the first local one, the ``TierQueue`` before it; ``StoreHistory`` does the same for the
commit log (a record at an offset, a scan in log order, the older matches of a key query) and
owns the tier's history object (a writer's comes from its running tier, a read-only opener
makes its own on first use). No other read code asks whether the tier holds something.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

from strata.format import record as rec
from strata.store.message import GetResult, GetStatus
from strata.store.queue_source import LocalQueue, TierQueue

if TYPE_CHECKING:
    from strata.index.consume_queue import ConsumeQueue
    from strata.store.tier_link import TierHistory, TierSupport


class QueueHistory:
    """A queue's whole history: the tier's part (``older``, None when the tier holds nothing
    below the local files) followed by the local part."""

    __slots__ = ("local", "older")

    def __init__(self, local: LocalQueue, older: TierQueue | None) -> None:
        self.local, self.older = local, older

    def min_offset(self) -> int:
        return (self.older or self.local).min_offset()

    def max_offset(self) -> int:
        return self.local.max_offset()

    def earliest_time(self) -> int:
        return (self.older or self.local).earliest_time()

    def offset_for_time(self, timestamp_ms: int, boundary: str) -> int:
        local, older = self.local, self.older
        if older is not None:   # the tier answers times before the local files' first message
            lo, hi = local.min_offset(), local.max_offset()
            if boundary == "lower":
                r = older.offset_for_time(timestamp_ms, "lower")
                if r < min(older.max_offset(), lo):
                    return r
            elif lo >= hi or timestamp_ms < local.time_at(lo):
                return older.offset_for_time(timestamp_ms, "upper")
        return local.offset_for_time(timestamp_ms, boundary)

    def get(self, offset: int, max_messages: int, wanted: frozenset[str] | None) -> GetResult:
        """``MessageStore.get`` for this queue (arguments checked by the caller)."""
        local = self.local
        cq = local.cq   # (its bounds straight from the consume queue: a call less each)
        mn, mx = cq.min_offset(), cq.max_offset()
        if mx == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, mn, mx)
        if self.older is not None:   # retention deleted the oldest local files; the tier holds them
            if offset < mn:
                return self.older.get(offset, max_messages, wanted, mn, mx)
            mn = self.older.min_offset()
        if offset < mn:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], mn, mn, mx)
        if offset == mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, mn, mx)
        if offset > mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], mx, mn, mx)
        return local.get(offset, max_messages, wanted, mn, mx)

    def local_part(self) -> LocalQueue | None:
        """The local source when it alone holds the whole queue (readers with a faster
        local-only path, like ``get_columns``, use it), else None."""
        return self.local if self.older is None else None


class StoreHistory:
    """A store's history, local and tiered."""

    def __init__(self, store, tier: "TierSupport | None", local_only: bool) -> None:
        self.store = store
        self.tier_support = tier
        self.local_only = local_only
        self._reader_history: "TierHistory | None" = None   # a read-only opener's, lazily

    # ------------------------------------------------------------------ the tier's part

    def tier_history(self) -> "TierHistory | None":
        """The tier's history of this store (None without a tier); a read-only opener makes
        its own, on first use, from the tier the store remembers."""
        store = self.store
        if self.local_only:
            return None
        if store.tier is not None:
            return store.tier.history
        if not store.readonly or store.config.tier_url is None or self.tier_support is None:
            return None
        if self._reader_history is None:
            self._reader_history = self.tier_support.history(store)
        return self._reader_history

    def local_min_phys(self) -> int:
        """The first commit-log offset still in the local files."""
        store = self.store
        return store._readonly_min_offset() if store.readonly else store.log.min_offset()

    def _older(self, topic: str, queue_id: int, local_min: int) -> TierQueue | None:
        """The tier's part of the queue if it holds messages below ``local_min`` (the queue's
        first local offset), else None."""
        if local_min <= 0 or self.local_only or self.store.config.tier_url is None:
            return None
        h = self.tier_history()
        if h is None:
            return None
        t = TierQueue(h, topic, queue_id, self.store.path)
        if not t.holds() or t.min_offset() >= local_min:
            return None
        return t

    # ------------------------------------------------------------------ queues

    def all_local(self, topic: str, queue_id: int, cq: "ConsumeQueue") -> bool:
        """Whether the local files alone hold the queue whose local consume queue is ``cq``
        (``queue(...).local_part()`` without making the queue's history: ``get_columns``)."""
        return self._older(topic, queue_id, cq.min_offset()) is None

    def queue(self, topic: str, queue_id: int, cq: "ConsumeQueue") -> QueueHistory:
        """The history of the queue whose local consume queue is ``cq``."""
        local = LocalQueue(self.store, topic, queue_id, cq)
        return QueueHistory(local, self._older(topic, queue_id, cq.min_offset()))

    # ------------------------------------------------------------------ the commit log

    def read_at(self, offset: int) -> rec.StoredMessage | None:
        """The record at commit-log ``offset``: from the tier where retention deleted it."""
        store = self.store
        if offset < self.local_min_phys():
            h = self.tier_history()
            if h is not None:
                return h.read_at(offset)
        return store.log.read(offset, store.confirmed_offset(),
                              verify_crc=store.config.verify_crc_on_read, strict=True)

    def scan_parts(self, from_offset: int, to_offset: int | None, verify_crc: bool,
                   on_damage) -> Iterator[Iterable]:
        """What ``scan`` yields, a part at a time: the tier's history, then the local log's
        batches (the limit is taken when the scan starts)."""
        store = self.store
        limit = store.confirmed_offset()
        stop = to_offset if to_offset is not None and to_offset < limit else None
        low = self.local_min_phys()
        if from_offset < low and store.config.tier_url is not None:
            h = self.tier_history()   # what retention deleted, as far as the tier holds it
            if h is not None:
                yield h.scan(from_offset, min(low, limit if stop is None else stop))
        # A damaged record is skipped with a logged error (README "Durability").
        yield from store.log.scan_batches(
            from_offset, limit, verify_crc=verify_crc or store.config.verify_crc_on_read,
            on_damage=on_damage, stop=stop)

    def query_older(self, topic: str, key: str, begin_ms: int, end_ms: int, max_results: int,
                    since: int) -> Iterator[rec.StoredMessage]:
        """The matches of a key query the tier holds below the local files (newest first;
        what it holds above them is answered locally)."""
        if self.store.tier is None and self.store.config.tier_url is None:
            return                        # no tier: nothing older, and no look at the log
        low = self.local_min_phys()
        h = self.tier_history() if low > 0 else None
        if h is None:
            return
        for m in h.query(topic, key, begin_ms=begin_ms, end_ms=end_ms,
                         max_results=max_results, below=low):
            if since <= m.commitlog_offset < low:
                yield m

    def close(self) -> None:
        if self._reader_history is not None:
            self._reader_history.close()
            self._reader_history = None
