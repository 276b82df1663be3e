"""The upload dispatcher: copies each queue's confirmed messages to the tier in the
background, chunk by chunk, without ever holding the put lock.

Crash safety comes from the order of steps. A chunk's three objects go up first, under names
fixed by the chunk's first queue offset; only then does the metadata store count them
(atomic local commit), and after that its copy goes to the tier. A crash before the commit
leaves objects nothing counts: the next run starts at the same offset and overwrites them, and
at start every object the metadata does not count is deleted. So an interrupted upload leaves
no gap, no duplicate and no counted orphan.

Which data goes up: the units the dispatch pipeline has written whose records lie below the
store's confirmed offset (the flushed offset under ``flush="sync"``). In the background a
queue is uploaded once ``min_chunk_bytes`` are pending or its oldest pending message is older
than ``max_delay_s``; ``sync`` uploads everything confirmed at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from strata.errors import StrataError
from strata.format.consume_queue import BLANK_SIZE
from strata.tiered.backend import TierBackend
from strata.tiered.chunk import Chunk, build_chunk
from strata.tiered.errors import (TierConflictError, TierError, TierRefusedError,
                                  TierUnavailableError)
from strata.tiered.layout import chunk_path, parse_chunk_path
from strata.tiered.metadata import MetadataStore, QueueMeta

if TYPE_CHECKING:
    from strata.store.message_store import MessageStore

log = logging.getLogger(__name__)

MiB = 1 << 20


@dataclass
class UploadPolicy:
    """How the dispatcher batches uploads."""

    chunk_bytes: int = 64 * MiB        # a chunk's .log object stops growing past this
    chunk_messages: int = 262_144      # ... or at this many messages
    min_chunk_bytes: int = 4 * MiB     # background: upload a queue once this much is pending
    max_delay_s: float = 30.0          # ... or its oldest pending message is this old
    interval_s: float = 1.0            # background rounds
    commit_every: int = 16             # commit metadata at least every this many chunks
    mapped_bytes: int = 512 * MiB      # sealed segments read for chunks kept mapped (LRU)
    retry_backoff_s: tuple[float, float] = (0.5, 30.0)  # after a failed round: first, max


@dataclass
class UploadProgress:
    """Totals for progress bars and ``tier stat``."""

    messages: int = 0
    bytes: int = 0
    chunks: int = 0


class UploadDispatcher:
    """Background uploads of one store's queues to one tier."""

    def __init__(self, store: "MessageStore", backend: TierBackend, meta: MetadataStore,
                 policy: UploadPolicy | None = None) -> None:
        self.store = store
        self.backend = backend
        self.meta = meta
        self.policy = policy or UploadPolicy()
        self.uploaded = UploadProgress()
        self.last_error: str | None = None
        self.attached = False
        self.fatal: TierError | None = None   # a conflict: uploads stop for good
        # the last round's TierRefusedError (no credentials, bucket or right), for sync
        self.refused: TierRefusedError | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._sync_wanted = 0
        self._sync_done = 0
        self._pending_chunks = 0
        self._backoff = 0.0
        self._on_chunk: Callable[[int, int], None] | None = None
        self.clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000  # tests: a clock
        self.expired_chunks = 0
        # per queue, the first offset not durably on the tier (counted by the local metadata
        # and by its tier copy): what local retention may delete below (``durable_next``)
        self.durable: dict[tuple[str, int], int] = {}   # (set once the tier is met)
        self._thread = threading.Thread(target=self._run, name="strata-tier-upload",
                                        daemon=True)
        # a chunk's objects are written here while the upload thread builds the next one,
        # into the other of two buffers that are used again and again (chunk.build_chunk)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="strata-tier-put")
        self._buffers: list = [None, None]
        self._turn = 0
        self._inflight: tuple[QueueMeta, Chunk, Future] | None = None
        self._intact: set[int] = set()   # sealed segments whose footer CRC matched
        self._mapped: OrderedDict[int, object] = OrderedDict()   # segments read, LRU order

    # ------------------------------------------------------------------ lifetime

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("tier %s: an upload is still running at close; it is abandoned "
                            "(nothing it wrote counts until the next run uploads it again)",
                            self.backend.url)
        self._writer.shutdown(wait=not self._thread.is_alive())

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def sync(self, timeout_s: float = 60.0,
             on_chunk: Callable[[int, int], None] | None = None) -> None:
        """Upload everything confirmed now; return when the tier holds it (data and metadata
        copy). TierUnavailableError naming the last failure if that takes over ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self.fatal is not None:
                raise self.fatal
            self._sync_wanted += 1
            ticket = self._sync_wanted
            self._on_chunk = on_chunk
            self.refused = None      # only a refusal met while this sync waits ends it
        self._backoff = 0.0
        self._wake.set()
        with self._cond:
            while self._sync_done < ticket:
                if self.fatal is not None:
                    raise self.fatal
                if not self._thread.is_alive():
                    raise TierError(f"tier {self.backend.url}: the upload thread has stopped")
                if self.refused is not None:     # waiting cannot fix it: say so now
                    self._on_chunk = None
                    raise self.refused
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TierUnavailableError(
                        f"tier {self.backend.url}: not everything confirmed was uploaded "
                        f"within {timeout_s} s (last error: {self.last_error or 'none'})")
                self._cond.wait(min(left, 0.5))
            self._on_chunk = None

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                wanted = self._sync_wanted
            forced = wanted > self._sync_done
            try:
                if not self.attached:
                    self._attach()
                self.round(forced)
            except TierConflictError as exc:
                self.last_error = str(exc)
                log.error("%s; uploads stop", exc)
                with self._cond:
                    self.fatal = exc
                    self._cond.notify_all()
                return
            except (TierError, StrataError, OSError, ValueError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, TierRefusedError):
                    with self._cond:
                        self.refused = exc
                        self._cond.notify_all()
                self._backoff = min(max(self._backoff * 2, self.policy.retry_backoff_s[0]),
                                    self.policy.retry_backoff_s[1])
                log.warning("tier %s: upload round failed (%s); retrying in %.1f s",
                            self.backend.url, self.last_error, self._backoff)
                self._wake.wait(self._backoff)
                self._wake.clear()
                continue
            except Exception as exc:  # a bug: say so, keep the store running
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("tier %s: upload round failed", self.backend.url)
                self._wake.wait(self.policy.retry_backoff_s[1])
                self._wake.clear()
                continue
            self.last_error = None
            self._backoff = 0.0
            if forced:
                with self._cond:
                    self._sync_done = max(self._sync_done, wanted)
                    self._cond.notify_all()
            with self._cond:
                again = self._sync_wanted > self._sync_done
            if not again:
                self._wake.wait(self.policy.interval_s)
                self._wake.clear()

    def _attach(self) -> None:
        """First contact with the tier: reconcile metadata, drop what a crash left behind."""
        self.backend.clean_partial()
        self.meta.attach(self.backend, self.adoption_problem)
        self.remove_orphans()
        self.attached = True
        if self.meta.tier_synced:
            self._note_durable()

    def _note_durable(self) -> None:
        """The metadata as it is now is committed locally and copied to the tier."""
        self.durable = {(q.topic, q.queue_id): q.next_offset
                        for q in list(self.meta.meta.queues.values())}

    def durable_next(self, topic: str, queue_id: int) -> int:
        """The first offset of the queue not yet durably on the tier."""
        return self.durable.get((topic, queue_id), 0)

    def adoption_problem(self, theirs) -> str | None:
        """Why the tier's metadata cannot be this store's (None: it can): every queue it
        counts must exist here at least as far, and where the store still holds the last
        uploaded message, at the same commit-log offset."""
        for q in theirs.queues.values():
            if not q.chunks:
                continue
            cq = self.store.queues.get(q.topic, q.queue_id)
            if cq is None or cq.max_offset() < q.next_offset:
                return (f"its queue {q.topic}/{q.queue_id} reaches offset {q.next_offset}, "
                        f"this store's {cq.max_offset() if cq else 0}")
            last = q.chunks[-1]
            if cq.min_offset() < last.end:
                off, size, _tag = cq.unit(last.end - 1)
                if off + size != last.end_phys:
                    return (f"its {q.topic}/{q.queue_id} offset {last.end - 1} ends at "
                            f"commit-log offset {last.end_phys}, this store's at {off + size}")
        return None

    def remove_orphans(self) -> int:
        """Delete chunk objects the metadata does not count (left by an interrupted run)."""
        counted = set()
        for q in self.meta.meta.queues.values():
            for c in q.chunks:
                counted.update(chunk_path(q.topic, q.queue_id, c.first, k)
                               for k in ("log", "cq", "keys"))
        n = 0
        for path in self.backend.list("queues/"):
            if parse_chunk_path(path) is not None and path not in counted:
                self.backend.delete(path)
                n += 1
        if n:
            log.info("tier %s: removed %d objects of uploads a crash interrupted",
                     self.backend.url, n)
        return n

    # ------------------------------------------------------------------ rounds

    def round(self, forced: bool) -> None:
        """One pass over every queue; ``forced`` uploads everything confirmed."""
        store = self.store
        limit = store.confirmed_offset()
        meta = self.meta.meta
        try:
            for topic, n_queues in sorted(store.topic_table.queues.items()):
                for qid in range(n_queues):
                    if self._stop.is_set():
                        return
                    cq = store.queues.get(topic, qid)
                    if cq is None:
                        continue
                    q = meta.queue_for_update(topic, qid) if cq.max_offset() else meta.queue(
                        topic, qid)
                    if q is None:
                        continue
                    self._upload_queue(q, cq, limit, forced)
            self._count_inflight()
        finally:
            self._drop_inflight()
        if self._stop.is_set():
            return
        self.expire(self.clock_ms())
        if self._pending_chunks:
            self._commit()
        if not self.meta.tier_synced:
            self.meta.push(self.backend)
        if not self._pending_chunks and self.meta.tier_synced:
            self._note_durable()   # committed and copied: local retention may delete below

    def expire(self, now_ms: int) -> int:
        """Tier retention: drop every queue's oldest chunks whose newest message was stored
        more than ``tier_retention_hours`` before ``now_ms``. The metadata stops counting them
        first (committed), then their objects are deleted: a crash in between leaves orphans
        the next start deletes. Returns the chunks dropped."""
        keep_ms = self.store.config.tier_retention_hours * 3_600_000
        if self._stop.is_set():
            return 0   # closing: nothing may be dropped that the log would still count
        gone = []
        for q in self.meta.meta.queues.values():
            n = 0
            while n < len(q.chunks) and q.chunks[n].max_ts < now_ms - keep_ms:
                n += 1
            if n:
                gone.extend((q.topic, q.queue_id, c) for c in q.chunks[:n])
                del q.chunks[:n]
        if not gone:
            return 0
        self._pending_chunks += 1
        self._commit()
        self.meta.push(self.backend)   # no copy may count a chunk whose objects are gone
        for topic, qid, c in gone:
            for kind in ("log", "cq", "keys"):
                self.backend.delete(chunk_path(topic, qid, c.first, kind))
        log.info("tier %s: %d chunks past tier_retention_hours deleted", self.backend.url,
                 len(gone))
        self.expired_chunks += len(gone)
        return len(gone)

    def _commit(self) -> None:
        if self._stop.is_set():
            return  # closing: a commit after close could race a new owner of the directory
        self.meta.commit()   # O(change): a record appended to the local log
        self._pending_chunks = 0

    def _pending_units(self, q: QueueMeta, cq, limit: int,
                       after: int | None = None) -> tuple[int, np.ndarray | None]:
        """(first offset, units) not yet uploaded whose records lie below ``limit``, at most
        one chunk's worth, all real (a leading run of blank units is skipped over). ``after``:
        the end of a chunk still being written (not counted yet); units None then means the
        metadata must change first (skipped offsets): finish that chunk, then ask again."""
        start = q.next_offset if after is None else after
        mn = cq.min_offset()
        if start < mn:   # local retention deleted messages that never reached the tier
            if after is not None:
                return start, None
            log.error("tier %s: %s/%d offsets %d..%d were deleted locally before they were "
                      "uploaded; the tier skips them", self.backend.url, q.topic, q.queue_id,
                      start, mn - 1)
            q.skipped += mn - start
            q.next_offset = start = mn
            self._pending_chunks += 1
        units = cq.read_units(start, self.policy.chunk_messages)
        if len(units) == 0:
            return start, units
        real = units["size"] != BLANK_SIZE
        if not real[0]:
            if after is not None:
                return start, None
            lead = int(np.argmax(real)) if real.any() else len(units)
            q.skipped += lead
            q.next_offset = start = start + lead
            self._pending_chunks += 1
            units = units[lead:]
            real = real[lead:]
        if not real.all():
            units = units[:int(np.argmin(real))]
        ends = units["offset"] + units["size"]
        units = units[:int(np.searchsorted(ends, limit, side="right"))]
        sizes = np.cumsum(units["size"].astype(np.int64))
        cut = int(np.searchsorted(sizes, self.policy.chunk_bytes, side="right"))
        return start, units[:max(cut, 1)] if len(units) else units

    def _due(self, units: np.ndarray) -> bool:
        if int(units["size"].astype(np.int64).sum()) >= self.policy.min_chunk_bytes:
            return True
        ts = self.store.log.store_time_at(int(units["offset"][0]))
        if ts is None:
            return True
        return time.time() * 1000 - ts >= self.policy.max_delay_s * 1000

    def _put_chunk(self, q: QueueMeta, chunk: Chunk) -> None:
        """Write a chunk's objects (on the writer thread)."""
        first = chunk.meta.first
        items = [(chunk_path(q.topic, q.queue_id, first, "log"), chunk.log),
                 (chunk_path(q.topic, q.queue_id, first, "cq"), chunk.cq)]
        if chunk.meta.keys_count:
            items.append((chunk_path(q.topic, q.queue_id, first, "keys"), chunk.keys))
        self.backend.put_many(items)   # all durable before the metadata may count them

    def _release(self, touched: list) -> None:
        """Keep the sealed segments chunks were built from mapped up to ``mapped_bytes``
        (queues share segments: the next queue's chunk reads the same ones), and release the
        least recently read beyond that, as the store does after sealing: the process's RSS
        follows that budget, not the history uploaded."""
        for seg in touched:
            self._mapped.pop(seg.base_offset, None)
            self._mapped[seg.base_offset] = seg
        total = sum(s.data_size for s in self._mapped.values())
        while total > self.policy.mapped_bytes and len(self._mapped) > 1:
            _base, seg = self._mapped.popitem(last=False)
            total -= seg.data_size
            if seg.sealed:
                seg.release_pages()

    def _count_inflight(self) -> None:
        """Wait for the chunk in flight to be written, then let the metadata count it."""
        if self._inflight is None:
            return
        q, chunk, written = self._inflight
        self._inflight = None
        written.result()   # the backend's error, if the writes failed
        q.chunks.append(chunk.meta)
        q.next_offset = chunk.meta.end
        self._pending_chunks += 1
        self.uploaded.messages += chunk.meta.count
        self.uploaded.bytes += chunk.meta.log_bytes
        self.uploaded.chunks += 1
        if self._on_chunk is not None:
            self._on_chunk(chunk.meta.count, chunk.meta.log_bytes)
        if self._pending_chunks >= self.policy.commit_every:
            self._commit()

    def _drop_inflight(self) -> None:
        """A round failed or is stopping: wait for the chunk in flight, never count it (its
        objects are orphans the next start deletes, or a later upload replaces)."""
        if self._inflight is not None:
            written = self._inflight[2]
            self._inflight = None
            try:
                written.result()
            except Exception:   # the round's own error is already on its way
                pass

    def _upload_queue(self, q: QueueMeta, cq, limit: int, forced: bool) -> None:
        """Upload a queue's pending chunks. Each chunk is built while the one before (of this
        queue or the previous one) is written on the writer thread (the writes release the
        GIL); two buffers take turns, and a chunk counts only once its objects are written,
        in order."""
        while not self._stop.is_set():
            ahead = self._inflight is not None and self._inflight[0] is q
            first, units = self._pending_units(
                q, cq, limit, self._inflight[1].meta.end if ahead else None)
            if units is None:
                self._count_inflight()
                continue
            if len(units) == 0 or not (forced or self._due(units)):
                return
            # with no chunk being written, a segment's footer CRC (15 ms per 256 MiB) would
            # only delay the first write: that chunk's records are checked one by one
            chunk = build_chunk(self.store.log, q.topic, q.queue_id, first, units,
                                self._buffers[self._turn], self._intact,
                                footer_now=self._inflight is not None)
            self._buffers[self._turn] = chunk.buffer
            self._turn ^= 1
            self._release(chunk.touched)
            self._count_inflight()
            self._inflight = (q, chunk, self._writer.submit(self._put_chunk, q, chunk))

    def lag(self) -> dict[tuple[str, int], int]:
        """Per queue: messages dispatched locally and not yet on the tier."""
        out = {}
        meta = self.meta.meta
        for topic, n_queues in sorted(self.store.topic_table.queues.items()):
            for qid in range(n_queues):
                cq = self.store.queues.get(topic, qid)
                if cq is None:
                    continue
                q = meta.queue(topic, qid)
                done = q.next_offset if q is not None else 0
                out[(topic, qid)] = max(0, cq.max_offset() - max(done, cq.min_offset()))
        return out
