"""``TierService``: what a store with a ``tier_url`` runs — the backend, the metadata store
and the upload dispatcher, started with the store and stopped with it.

``MessageStore`` knows only ``start``, ``sync`` and ``stop`` of it (the tiered layer sits above
the store and registers ``TierService.for_store`` with it; see ``strata.tiered``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from strata.tiered.backend import TierBackend
from strata.tiered.connect import open_backend
from strata.tiered.dispatcher import UploadDispatcher, UploadPolicy, UploadProgress
from strata.tiered.metadata import MetadataStore
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
        return TierStat(self.backend.url, d.attached, d.last_error, meta.generation,
                        self.meta.tier_synced, d.uploaded, queues)
