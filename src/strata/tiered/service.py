"""``TierService``: what a store with a ``tier_url`` runs — the backend, the metadata store
and the upload dispatcher, started with the store and stopped with it.

``MessageStore`` knows it as a ``TierLink`` (``strata.store.tier_link``: start, sync, stop,
``history`` for its reads and ``uploaded`` for its retention); the tiered layer sits above the
store and registers ``TierService.for_store`` and ``history_for_reader`` with it (see
``strata.tiered``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from strata.tiered.backend import TierBackend
from strata.tiered.connect import open_backend
from strata.tiered.dispatcher import UploadDispatcher, UploadPolicy, UploadProgress
from strata.tiered.metadata import (LOCAL_DIR, LOCAL_FILE, MetadataStore, TierMetadata,
                                    read_local)
from strata.tiered.reader import TieredQueueReader

if TYPE_CHECKING:
    from strata.store.message_store import MessageStore

# Tests: wrap every new store's backend (fault injection), e.g. in a child process.
BACKEND_HOOK: Callable[[TierBackend], TierBackend] | None = None
# Tests and tools: the upload policy new stores use (None: UploadPolicy()).
DEFAULT_POLICY: UploadPolicy | None = None


@dataclass
class QueueStat:
    topic: str
    queue_id: int
    tier_min: int
    tier_max: int
    chunks: int
    bytes: int
    local_max: int
    lag: int
    skipped: int


@dataclass
class TierStat:
    url: str
    attached: bool
    last_error: str | None
    generation: int
    tier_copy_current: bool
    uploaded: UploadProgress
    queues: list[QueueStat] = field(default_factory=list)
    # commit-log segments local retention deleted before the tier held them (disk pressure
    # or clean_expired(force=True); logged as errors), since the store was opened
    deleted_before_upload: int = 0


class TierService:
    """The tier of one writing store."""

    def __init__(self, store: "MessageStore", backend: TierBackend,
                 policy: UploadPolicy | None = None) -> None:
        cfg = store.config
        self.store = store
        self.backend = backend
        self.meta = MetadataStore(store.path, cfg.tier_url, cfg.tier_endpoint_url,
                                  store.file_ops)
        self.dispatcher = UploadDispatcher(store, backend, self.meta, policy or DEFAULT_POLICY)
        self.history = self.reader()   # what the store's reads fall back to

    def uploaded(self, topic: str, queue_id: int) -> int:
        """The first offset of the queue not yet durably on the tier (local retention
        deletes only below it)."""
        return self.dispatcher.durable_next(topic, queue_id)

    @classmethod
    def for_store(cls, store: "MessageStore") -> "TierService":
        backend = open_backend(store.config.tier_url, store.config.tier_endpoint_url)
        if BACKEND_HOOK is not None:
            backend = BACKEND_HOOK(backend)
        return cls(store, backend)

    def start(self) -> None:
        self.dispatcher.start()

    def stop(self) -> None:
        self.dispatcher.stop()
        self.backend.close()

    def sync(self, timeout_s: float = 60.0,
             on_chunk: Callable[[int, int], None] | None = None) -> None:
        # what is confirmed now must be in the consume queues before it can be uploaded
        self.store.wait_dispatched(timeout_s)
        self.dispatcher.sync(timeout_s, on_chunk)

    def reader(self, cache_bytes: int = 64 << 20) -> TieredQueueReader:
        """A reader of what this store has uploaded so far."""
        return TieredQueueReader(self.backend, lambda: self.meta.meta, cache_bytes=cache_bytes)

    def stat(self) -> TierStat:
        d = self.dispatcher
        meta = self.meta.meta
        lag = d.lag()
        queues = []
        for (topic, qid), behind in lag.items():
            q = meta.queue(topic, qid)
            cq = self.store.queues.get(topic, qid)
            queues.append(QueueStat(
                topic, qid, q.min_offset() if q else 0, q.max_offset() if q else 0,
                len(q.chunks) if q else 0, q.bytes() if q else 0,
                cq.max_offset() if cq else 0, behind, q.skipped if q else 0))
        retention = self.store.retention
        return TierStat(self.backend.url, d.attached, d.last_error, meta.generation,
                        self.meta.tier_synced, d.uploaded, queues,
                        retention.deleted_before_upload if retention is not None else 0)


class FollowedMetadata:
    """A read-only opener's view of a store's tier metadata: the writer's local log, read
    again whenever it grew or was replaced (appended records end whole or are ignored as a
    torn tail; compaction replaces it atomically). With no local file the store
    has uploaded nothing it counts (its writer rebuilds a lost file from the tier's copy when
    it next meets the tier): the view is empty, and reads never wait on the network for it."""

    def __init__(self, store_path: str | os.PathLike, tier_url: str) -> None:
        self.path = Path(store_path) / LOCAL_DIR / LOCAL_FILE
        self.tier_url = tier_url
        self._seen: tuple | None = None
        self._meta: TierMetadata | None = None

    def __call__(self) -> TierMetadata:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._meta is None:
                self._meta = TierMetadata(store_id="", tier_url=self.tier_url)
            return self._meta
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        if seen != self._seen or self._meta is None:
            self._meta = read_local(self.path.parent.parent) or self._meta
            self._seen = seen
        return self._meta


def history_for_reader(store: "MessageStore") -> TieredQueueReader:
    """A read-only opener's tier history: the tier the store remembers, the metadata its
    writer keeps (``FollowedMetadata``)."""
    backend = open_backend(store.config.tier_url, store.config.tier_endpoint_url)
    if BACKEND_HOOK is not None:
        backend = BACKEND_HOOK(backend)
    return TieredQueueReader(backend, FollowedMetadata(store.path, store.config.tier_url))
