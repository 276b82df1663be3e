"""The tier's metadata store: per queue, the uploaded chunks (offset ranges, objects, sizes,
checksums, min/max stored time) — kept apart from the data objects (RIP-65's lesson).

It lives in ``<store>/tiered/metadata.log``, an append-only log of CRC-framed JSON records:
a snapshot of the whole document, then one record per commit holding only what that commit
changed (chunks added, oldest chunks dropped, offsets), each appended and fsynced — a commit
costs O(change), not O(history). Past a size the log is compacted into one snapshot (a new
file written atomically: temp file, fsync, rename, directory fsync). A torn record at the end
(a crash mid-append) is where the log ends; the writer cuts it off. The framing, the torn-tail
cut and the appends are ``strata.files.journal``'s (shared with the broker's journals). A
store written before the log (``metadata.json``) is read once and moved into a log.

The tier gets a copy, ``meta/tier.json``, with a conditional write, so a second store pointed
at the same tier cannot overwrite it blindly and a store can be rebuilt from the tier alone.
The local log is the truth for the writer; the copy lags it by up to an upload round (it is
written once per round and before chunks are deleted from the tier).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from strata.files import journal as framing
from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.files.journal import JournalReader, JournalWriter
from strata.files.layout import TIERED_DIR as LOCAL_DIR
from strata.tiered.backend import TierBackend
from strata.tiered.errors import CorruptTierError, TierConflictError
from strata.tiered.layout import META_PATH

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
LOCAL_FILE = "metadata.log"
OLD_LOCAL_FILE = "metadata.json"      # before the log: one document, replaced per commit

LOG_MAGIC = b"STRTMLG1"               # the log's first 8 bytes
FRAME = framing.FRAME                 # payload length, CRC32C of the payload
COMPACT_MIN_BYTES = 1 << 20           # compact once the log is past this ...
COMPACT_FACTOR = 4                    # ... and this many times its last snapshot


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

    def to_doc(self) -> dict:
        doc = asdict(self)
        doc["queues"] = {k: {**asdict(q), "chunks": [list(asdict(c).values()) for c in q.chunks]}
                         for k, q in self.queues.items()}
        doc["chunk_fields"] = list(ChunkMeta.__dataclass_fields__)
        return doc

    def to_json(self) -> bytes:
        return _dumps(self.to_doc())

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


def _dumps(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


frame = framing.frame
"""One log record: length, CRC32C, payload."""


def snapshot_record(meta: TierMetadata) -> bytes:
    return frame(_dumps({"kind": "snapshot", **meta.to_doc()}))


def apply_commit(meta: TierMetadata, rec: dict) -> None:
    """Apply one commit record (``QueueLog.changes``) to ``meta``."""
    meta.generation = int(rec["generation"])
    for k, ch in rec["queues"].items():
        q = meta.queues.get(k)
        if q is None:
            q = meta.queues[k] = QueueMeta(ch["topic"], int(ch["queue_id"]))
        if ch["drop"]:
            del q.chunks[:int(ch["drop"])]
        q.chunks.extend(ChunkMeta(*map(int, c)) for c in ch["add"])
        q.next_offset = int(ch["next_offset"])
        q.skipped = int(ch["skipped"])


@dataclass
class LogContents:
    """What a metadata log holds: the document, the bytes up to the end of the last whole
    record, and the size of its snapshot record."""

    meta: TierMetadata
    end: int
    snapshot_bytes: int
    torn: int           # bytes after the last whole record (a crash mid-append)


def replay(raw: bytes, where: str) -> LogContents:
    """The document a log's bytes describe: its snapshot with every whole commit record after
    it applied. The log ends at the first record that is cut short or fails its CRC32C."""
    if raw[:len(LOG_MAGIC)] != LOG_MAGIC:
        raise CorruptTierError(f"{where}: not a tier metadata log (magic "
                               f"{raw[:len(LOG_MAGIC)]!r})", where)
    meta: TierMetadata | None = None
    snap = 0
    # every length is a record here: a frame whose payload does not parse is damage
    reader = JournalReader(raw, len(LOG_MAGIC), max_payload=1 << 62, allow_empty=True)
    for payload in reader:
        pos = reader.end
        try:
            rec = json.loads(payload)
            if rec.get("kind") == "snapshot" and meta is None:
                del rec["kind"]
                meta = TierMetadata.from_json(_dumps(rec), where)
                snap = FRAME.size + len(payload)
            elif rec.get("kind") == "commit" and meta is not None:
                apply_commit(meta, rec)
            else:
                raise ValueError(f"unexpected record kind {rec.get('kind')!r}")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptTierError(f"{where}: record at byte {pos} is unreadable ({exc})",
                                   where) from None
    if meta is None:
        raise CorruptTierError(f"{where}: the log holds no whole snapshot record", where)
    return LogContents(meta, reader.end, snap, reader.dropped)


def read_local(store_path: str | Path) -> TierMetadata | None:
    """The store's local metadata, None if it has none."""
    d = Path(store_path) / LOCAL_DIR
    try:
        raw = (d / LOCAL_FILE).read_bytes()
    except FileNotFoundError:
        try:
            raw = (d / OLD_LOCAL_FILE).read_bytes()
        except FileNotFoundError:
            return None
        return TierMetadata.from_json(raw, str(d / OLD_LOCAL_FILE))
    return replay(raw, str(d / LOCAL_FILE)).meta


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
    """The writer's metadata: load, change in memory, ``commit`` (a record appended to the
    local log), ``push`` (the tier's copy)."""

    def __init__(self, store_path: str | Path, tier_url: str, endpoint_url: str | None,
                 file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.dir = Path(store_path) / LOCAL_DIR
        self.path = self.dir / LOCAL_FILE
        self.file_ops = file_ops
        self.writer = JournalWriter(self.path, file_ops, keep_open=False)
        self.log_bytes = 0         # the log's size (0: no log yet, the next commit writes one)
        self.snapshot_bytes = 0
        local = self._load()
        if local is not None and local.tier_url != tier_url:
            raise TierConflictError(
                f"{self.path}: this store's tier is {local.tier_url}, but tier_url says "
                f"{tier_url}; move the tier's objects and the file together, or give the old URL")
        self.meta = local or TierMetadata(store_id=uuid.uuid4().hex, tier_url=tier_url,
                                          endpoint_url=endpoint_url)
        self.from_disk = local is not None
        self.tier_version: str | None = None
        self.tier_synced = False   # the tier's copy equals the local log
        self._base: dict[str, tuple[int, int, int, int]] = {}
        self._mark()

    def _load(self) -> TierMetadata | None:
        """The log's document; a torn last record (a crash mid-append) is cut off. A store
        with the old one-document file gets a log at its next commit."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return read_local(self.dir.parent)   # the old file, or None
        got = replay(raw, str(self.path))
        if got.torn:
            log.warning("%s: the last %d bytes are a record a crash cut short; cut off",
                        self.path, got.torn)
        self.writer.start(got.end, len(raw))
        self.log_bytes, self.snapshot_bytes = got.end, got.snapshot_bytes
        return got.meta

    def _mark(self) -> None:
        """Remember what the log holds now (per queue: chunks, last chunk's first offset,
        next offset, skipped), for the next commit's record of changes."""
        self._base = {k: (len(q.chunks), q.chunks[-1].first if q.chunks else -1,
                          q.next_offset, q.skipped) for k, q in self.meta.queues.items()}

    def changes(self) -> dict:
        """Per queue changed since the last commit: chunks dropped from the head, chunks added
        at the tail, offsets. O(change): only the new chunks are looked at."""
        out = {}
        for k, q in self.meta.queues.items():
            n, tail, nxt, skipped = self._base.get(k, (0, -1, 0, 0))
            added = 0
            while added < len(q.chunks) and q.chunks[-1 - added].first > tail:
                added += 1
            drop = n - (len(q.chunks) - added)
            if added or drop or nxt != q.next_offset or skipped != q.skipped or \
                    k not in self._base:
                out[k] = {"topic": q.topic, "queue_id": q.queue_id, "drop": drop,
                          "add": [list(asdict(c).values()) for c in q.chunks[len(q.chunks)
                                                                              - added:]],
                          "next_offset": q.next_offset, "skipped": q.skipped}
        return out

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
        """Write the log anew: one snapshot record (atomically), and drop the old one-document
        file if there is one."""
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, exist_ok=True)
            self.file_ops.fsync_dir(self.dir.parent)
        snap = snapshot_record(self.meta)
        self.writer.rewrite(LOG_MAGIC + snap)
        self.log_bytes, self.snapshot_bytes = len(LOG_MAGIC) + len(snap), len(snap)
        old = self.dir / OLD_LOCAL_FILE
        if old.exists():
            self.file_ops.remove(old)
            self.file_ops.fsync_dir(self.dir)
        self._mark()

    def commit(self) -> None:
        """Make the in-memory metadata durable locally (the point where uploaded chunks
        count): one record of what changed, appended and fsynced; the log is compacted into a
        snapshot once it is past COMPACT_MIN_BYTES and COMPACT_FACTOR times its snapshot. The
        caller pushes the tier copy."""
        self.meta.generation += 1
        if not self.log_bytes:
            self._write_local()
        else:
            rec = frame(_dumps({"kind": "commit", "generation": self.meta.generation,
                                "queues": self.changes()}))
            try:   # a record cut short is taken back: the log would end there
                self.writer.append(rec, sync=True)
            except BaseException:
                self.meta.generation -= 1
                raise
            self.log_bytes += len(rec)
            self._mark()
            if self.log_bytes > max(COMPACT_MIN_BYTES, COMPACT_FACTOR * self.snapshot_bytes):
                self._write_local()
        self.from_disk = True
        self.tier_synced = False

    def push(self, backend: TierBackend) -> None:
        """Copy the metadata to the tier, only over the version last seen there."""
        self.tier_version = backend.put_if(META_PATH, self.meta.to_json(), self.tier_version)
        self.tier_synced = True
