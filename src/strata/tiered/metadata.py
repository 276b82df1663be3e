"""The tier's metadata store: per queue, the uploaded chunks (offset ranges, objects, sizes,
checksums, min/max stored time) — kept apart from the data objects (RIP-65's lesson).

It lives in ``<store>/tiered/metadata.json`` (written atomically: temp file, fsync, rename,
directory fsync) and is copied to ``meta/tier.json`` on the tier after every commit with a
conditional write, so a second store pointed at the same tier cannot overwrite it blindly and
a store can be rebuilt from the tier alone. The local file is the truth for the writer; the
copy may lag it by one commit after a crash or while the tier is unreachable.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.tiered.backend import TierBackend
from strata.tiered.errors import CorruptTierError, TierConflictError
from strata.tiered.layout import META_PATH

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
LOCAL_DIR = "tiered"
LOCAL_FILE = "metadata.json"


@dataclass
class ChunkMeta:
    """One uploaded chunk of a queue: messages [first, first + count)."""

    first: int
    count: int
    log_bytes: int
    cq_crc: int          # CRC32C of the .cq object
    keys_count: int      # entries in the .keys object (0: no object)
    keys_crc: int        # CRC32C of the .keys object (0 if none)
    min_ts: int          # store time (ms) of the oldest / newest message
    max_ts: int
    first_phys: int      # commit-log offsets of the first record and past the last one
    end_phys: int

    @property
    def end(self) -> int:
        return self.first + self.count


@dataclass
class QueueMeta:
    """What the tier holds of one queue: chunks in offset order, no gaps between them except
    where ``skipped`` says local retention deleted messages before they were uploaded."""

    topic: str
    queue_id: int
    next_offset: int = 0           # the first queue offset not yet on the tier
    chunks: list[ChunkMeta] = field(default_factory=list)
    skipped: int = 0               # messages that were never uploaded (deleted locally first)

    def min_offset(self) -> int:
        return self.chunks[0].first if self.chunks else self.next_offset

    def max_offset(self) -> int:
        return self.chunks[-1].end if self.chunks else self.next_offset

    def bytes(self) -> int:
        return sum(c.log_bytes for c in self.chunks)

    def messages(self) -> int:
        return sum(c.count for c in self.chunks)


@dataclass
class TierMetadata:
    """The whole metadata document."""

    store_id: str
    tier_url: str
    endpoint_url: str | None = None
    generation: int = 0
    queues: dict[str, QueueMeta] = field(default_factory=dict)
    version: int = FORMAT_VERSION

    @staticmethod
    def key(topic: str, queue_id: int) -> str:
        return f"{topic}/{queue_id}"

    def queue(self, topic: str, queue_id: int) -> QueueMeta | None:
        return self.queues.get(self.key(topic, queue_id))

    def queue_for_update(self, topic: str, queue_id: int) -> QueueMeta:
        k = self.key(topic, queue_id)
        q = self.queues.get(k)
        if q is None:
            q = self.queues[k] = QueueMeta(topic, queue_id)
        return q

    def to_json(self) -> bytes:
        doc = asdict(self)
        doc["queues"] = {k: {**asdict(q), "chunks": [list(asdict(c).values()) for c in q.chunks]}
                         for k, q in self.queues.items()}
        doc["chunk_fields"] = list(ChunkMeta.__dataclass_fields__)
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> "TierMetadata":
        try:
            doc = json.loads(raw)
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"format version {doc.get('version')!r}, expected "
                                 f"{FORMAT_VERSION}")
            names = doc.pop("chunk_fields")
            if names != list(ChunkMeta.__dataclass_fields__):
                raise ValueError(f"unknown chunk fields {names}")
            queues = {}
            for k, q in doc.pop("queues").items():
                chunks = [ChunkMeta(*map(int, c)) for c in q.pop("chunks")]
                queues[k] = QueueMeta(chunks=chunks, **q)
            return cls(queues=queues, **doc)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptTierError(f"{where}: unreadable tier metadata ({exc})", where) from None


def read_local(store_path: str | Path) -> TierMetadata | None:
    """The store's local metadata, None if it has none."""
    path = Path(store_path) / LOCAL_DIR / LOCAL_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return TierMetadata.from_json(raw, str(path))


def read_tier(backend: TierBackend) -> tuple[TierMetadata | None, str | None]:
    """The tier's copy of the metadata and its version; (None, None) if there is none."""
    version = backend.version(META_PATH)
    if version is None:
        return None, None
    try:
        raw = backend.read(META_PATH)
    except FileNotFoundError:
        return None, None
    return TierMetadata.from_json(raw, f"{backend.url}/{META_PATH}"), version


class MetadataStore:
    """The writer's metadata: load, change in memory, ``commit`` (local file, then tier copy)."""

    def __init__(self, store_path: str | Path, tier_url: str, endpoint_url: str | None,
                 file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.dir = Path(store_path) / LOCAL_DIR
        self.path = self.dir / LOCAL_FILE
        self.file_ops = file_ops
        local = read_local(store_path)
        if local is not None and local.tier_url != tier_url:
            raise TierConflictError(
                f"{self.path}: this store's tier is {local.tier_url}, but tier_url says "
                f"{tier_url}; move the tier's objects and the file together, or give the old URL")
        self.meta = local or TierMetadata(store_id=uuid.uuid4().hex, tier_url=tier_url,
                                          endpoint_url=endpoint_url)
        self.from_disk = local is not None
        self.tier_version: str | None = None
        self.tier_synced = False   # the tier's copy equals the local file

    def attach(self, backend: TierBackend,
               adoption_problem: Callable[[TierMetadata], str | None]) -> None:
        """Meet the tier's copy: adopt it (no local file: rebuild from the tier, if
        ``adoption_problem`` finds the store's data agrees with it), refuse another store's,
        or bring it up to date. TierUnavailableError if unreachable."""
        theirs, version = read_tier(backend)
        if theirs is not None and theirs.store_id != self.meta.store_id:
            problem = "this store has its own tier metadata" if self.from_disk else \
                adoption_problem(theirs)
            if problem is not None:
                raise TierConflictError(
                    f"tier {backend.url} holds another store's data (store id "
                    f"{theirs.store_id}; {problem})")
            log.warning("store %s: no local tier metadata; rebuilt it from %s/%s "
                        "(generation %d)", self.dir.parent, backend.url, META_PATH,
                        theirs.generation)
            self.meta = theirs
            self._write_local()
            self.from_disk = True
        self.tier_version = version
        if not self.from_disk:   # the store's own identity is durable before the tier's copy
            self.commit()
        if theirs is None or theirs.generation != self.meta.generation:
            self.push(backend)
        else:
            self.tier_synced = True

    def _write_local(self) -> None:
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, exist_ok=True)
            self.file_ops.fsync_dir(self.dir.parent)
        self.file_ops.write_atomic(self.path, self.meta.to_json())

    def commit(self) -> None:
        """Make the in-memory metadata durable locally (the point where uploaded chunks
        count); the caller then pushes the tier copy."""
        self.meta.generation += 1
        self._write_local()
        self.from_disk = True
        self.tier_synced = False

    def push(self, backend: TierBackend) -> None:
        """Copy the metadata to the tier, only over the version last seen there."""
        self.tier_version = backend.put_if(META_PATH, self.meta.to_json(), self.tier_version)
        self.tier_synced = True
