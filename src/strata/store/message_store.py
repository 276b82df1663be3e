"""``MessageStore``: the embedded store, composed of the commit log, flush services, recovery,
the topic table and (from the queues layer) consume queues, key index and retention."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from strata.errors import (DiskFullError, InvalidInputError, ReadOnlyStoreError,
                           StoreClosedError, StoreNotFoundError)
from strata.files.checkpoint import AbortMarker, CheckpointFile, StatePage
from strata.files.flush import AsyncFlushService, GroupCommitService
from strata.files.io import DEFAULT_FILE_OPS, FileOps, disk_full_or_same
from strata.files.lock import LOCK_NAME, DirectoryLock
from strata.format import record as rec
from strata.log.commit_log import CommitLog
from strata.log.recovery import RecoveryReport, recover
from strata.store.config import StoreConfig
from strata.store.geometry import save_geometry, stored_config
from strata.index.dispatch import ReputService
from strata.index.key_index import KeyIndex
from strata.index.queues import ConsumeQueueSet
from strata.index.derived_check import DerivedSummaryFile
from strata.index.key_index_rebuild import KeyIndexRebuild
from strata.store import arrow_read
from strata.store.message import GetResult, Message, PutResult, PutResults
from strata.store import tier_link
from strata.store.tier_config import save_tier, with_stored_tier
from strata.store.prepared import Encoder
from strata.store.retention import RetentionService
from strata.store.topics import TopicTable, TopicType
from strata.store import background, open_recovery, put_path, read_path, topic_admin
from strata.store.put_path import (DISPATCH_HELP_SHARE, DISPATCH_STALL_S,  # noqa: F401 (re-exported)
                                   now_ms)
from strata.store.read_path import MAX_SCAN_UNITS, writer_alive  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"

# How often a read-only opener that found no writer looks again for one (a lock probe).
WRITER_PROBE_S = 0.1
FLUSH_WAIT_S = 60.0     # flush(): at most this long for the group commit to count the fsync


def check_messages(path: str | os.PathLike, msgs: Sequence[Message],
                   config: StoreConfig | None = None) -> None:
    """Raise what a put of ``msgs`` into the store at ``path`` would raise for its input
    (InvalidInputError and subclasses) without opening or creating anything: a command that
    opens a store only to put checks first, so a refused put never touches the disk."""
    path = Path(path)
    if config is None:
        config = stored_config(path) if path.is_dir() else StoreConfig()
    table = TopicTable(path, readonly=True)
    table.load()
    encoder = Encoder(config.store_host, config.max_body_size,
                      config.segment_size - rec.BLANK_MIN_SIZE, config.segment_size)
    batch = encoder.prepare(list(msgs))
    if len(batch):
        batch.choose_queues(table.queues, config.default_queues, {}, {})


class MessageStore:
    """An embedded message store in one directory. Open it with ``strata.open``."""

    def __init__(self, path: str | os.PathLike, config: StoreConfig | None = None, *,
                 readonly: bool = False, file_ops: FileOps | None = None,
                 create: bool = True, local_only: bool = False) -> None:
        """``local_only``: reads answer from the local files alone, never from the tier (for
        readers that read the tier themselves, as the Spark source does in its own tasks)."""
        self.path = Path(path)
        self._explicit_config = config is not None
        if config is None:   # the sizes the store was made with, defaults for the rest
            config = stored_config(self.path) if self.path.is_dir() else StoreConfig()
        self.config = config
        if not isinstance(self.config, StoreConfig):
            raise InvalidInputError(f"config must be a strata.StoreConfig, got "
                                    f"{type(self.config).__name__}")
        self.config.validate()
        # the tier the store remembers (config/tier.json): its history stays readable
        self.config = config = with_stored_tier(self.path, self.config)
        self.readonly = readonly
        self.file_ops = file_ops or DEFAULT_FILE_OPS
        self._closed = True
        self._put_lock = threading.Lock()
        self._lock = DirectoryLock(self.path)
        self._store_host = self.config.store_host
        self._msg_id_prefix = rec.msg_id_prefix(self._store_host)
        self.dispatch_wait_s = 0.0  # time puts spent waiting for the dispatch pipeline
        self.dispatch_helped = 0  # records producers dispatched themselves (it was behind)
        self._queue_next: dict[tuple[str, int], int] = {}
        self._round_robin: dict[str, int] = {}
        self._flusher: AsyncFlushService | None = None
        self._group_commit: GroupCommitService | None = None
        self._last_checkpoint = 0.0
        self._disk_full = False
        self._open_writes_pending = False   # opened on a full disk: checkpoint, marker unwritten
        self._appended_end = 0   # the log's end after the last whole put (what dispatch may read)
        self._checkpoint_refused = False    # the last periodic checkpoint found no room
        self._live_writer = False
        self._next_writer_probe = 0.0   # read-only openers with no writer: when to look again
        self.recovery_report: RecoveryReport | None = None
        self.tier: tier_link.TierLink | None = None  # a writer's tier (README "Tiered storage")
        self._history: tier_link.TierHistory | None = None  # read-only openers' (made lazily)
        self._local_only = local_only

        store_markers = (COMMITLOG_DIR, "checkpoint", "config", LOCK_NAME)
        if not self.path.is_dir():
            if self.path.exists():
                raise StoreNotFoundError(f"{self.path} exists and is not a directory")
            if readonly or not create:
                raise StoreNotFoundError(f"no strata store at {self.path}")
            self.path.mkdir(parents=True)
        elif not (self.path / COMMITLOG_DIR).is_dir():
            if readonly:
                raise StoreNotFoundError(
                    f"{self.path} is not a strata store (no {COMMITLOG_DIR}/ inside)")
            foreign = [p.name for p in self.path.iterdir() if p.name not in store_markers]
            if foreign:
                raise StoreNotFoundError(
                    f"{self.path} is not empty and is not a strata store (it holds "
                    f"{', '.join(sorted(foreign)[:3])}{', ...' if len(foreign) > 3 else ''}); "
                    "give an empty or new directory")

        self.topic_table = TopicTable(self.path, readonly=readonly, file_ops=self.file_ops,
                                      queues_dir=self.path / CONSUMEQUEUE_DIR)
        self.log = CommitLog(self.path / COMMITLOG_DIR, self.config.segment_size,
                             readonly=readonly, file_ops=self.file_ops,
                             prefault=self.config.prefault, preallocate=self.config.preallocate)
        self._encoder = Encoder(self._store_host, self.config.max_body_size,
                                self.log.max_record_size(), self.config.segment_size)
        self.queues = ConsumeQueueSet(self.path / CONSUMEQUEUE_DIR, self.config.consume_queue_units,
                                      readonly=readonly, file_ops=self.file_ops)
        self.key_index = KeyIndex(self.path / INDEX_DIR, slots=self.config.index_slots,
                                  entries=self.config.index_entries, readonly=readonly)
        self._reput: ReputService | None = None
        self._index_rebuild: KeyIndexRebuild | None = None   # a large rebuild, in background
        # called on the dispatch thread with the dispatched commit-log offset each time new
        # records reached their queues (a broker wakes its long polls with it); keep it cheap
        self.dispatch_listeners: list[Callable[[int], None]] = []
        self.retention: RetentionService | None = None
        self.checkpoint = CheckpointFile(self.path, self.file_ops)
        self.derived = DerivedSummaryFile(self.path, self.file_ops)
        self.abort_marker = AbortMarker(self.path, self.file_ops)
        self.state = StatePage(self.path, readonly=readonly)
        if readonly:
            self._open_readonly()
        else:
            self._open_writer()
        self._closed = False

    # ------------------------------------------------------------------ opening

    def _open_writer(self) -> None:
        self._lock.acquire()
        try:
            clean = not self.abort_marker.exists()
            cp = self.checkpoint.load()
            self.topic_table.load()
            self.log.load()
            self.recovery_report = recover(self.log, cp, clean)
            self._appended_end = self.log.max_offset()
            open_recovery.after_log_recovered(self, cp, clean)
            end = self.log.max_offset()
            self.state.open(confirmed=end, dispatched=end, min_offset=self.log.min_offset())
            try:
                self._open_writes()
            except DiskFullError as exc:
                # A way out from within: the store opens refusing puts, so that reads,
                # delete_topic and clean_expired work; _leave_disk_full writes these later.
                self._open_writes_pending = True
                self._disk_full = True
                log.warning("store %s opened on a full disk (%s): puts are refused until "
                            "space is freed; reads, delete_topic and clean_expired work",
                            self.path, exc)
            if self.topic_table.recovered:
                self.recovery_report.repaired_files.append(self.topic_table.recovered)
            if self.log.segments.last() is None and self.config.preallocate:
                self.log.segments.allocator.request(0)  # the first segment, in the background
            self._start_services()
        except BaseException:
            self.log.close()
            self._lock.release()
            raise

    def _open_writes(self) -> None:
        """What a writer's open writes once the log is recovered (DiskFullError on a full
        disk). From here on a crash is unclean: the marker says so, the checkpoint loses its
        end."""
        self._write_checkpoint(clean_end=-1)
        self.abort_marker.create()
        repaired = save_geometry(self.path, self.config, self.file_ops,
                                 explicit=self._explicit_config)
        save_tier(self.path, self.config, self.file_ops)
        if repaired and self.recovery_report is not None:
            self.recovery_report.repaired_files.append(repaired)

    def _leave_disk_full(self) -> bool:
        """Retention found room again: finish the writes a full disk held back at open, then
        accept puts; False (puts still refused) if there is still no room for them."""
        with self._put_lock:
            if self._open_writes_pending:
                try:
                    self._open_writes()
                except DiskFullError as exc:
                    log.warning("store %s: still no room for its open files (%s); puts stay "
                                "refused", self.path, exc)
                    return False
                self._open_writes_pending = False
            self._disk_full = False
        return True

    def _on_dispatched(self, offset: int) -> None:
        if self.state.is_open:
            self.state.set_dispatched(offset)
        for listener in self.dispatch_listeners:
            listener(offset)

    def _open_readonly(self) -> None:
        self.topic_table.load()
        self.log.load()
        self.queues.load()
        self._live_writer = writer_alive(self.path) and self.state.open()
        if not self._live_writer:
            cp = self.checkpoint.load()
            clean = not self.abort_marker.exists()
            self.recovery_report = recover(self.log, cp, clean, modify=False)
            self._readonly_limit = self.log.max_offset()
        self._refresh_readonly()

    def _refresh_readonly(self) -> None:
        """Read-only openers: follow the writer's confirmed offset and new segments."""
        if not self._live_writer and not self._writer_started():
            return
        _pid, confirmed, _disp, min_offset = self.state.read()
        last = self.log.segments.last()
        if last is None or confirmed > last.end_offset or confirmed > last.base_offset + last.committed \
                or min_offset > self.log.min_offset():   # retention deleted segments
            self.log.segments.refresh()
        for seg in self.log.segments.segments:
            seg.committed = max(0, min(seg.data_size, confirmed - seg.base_offset))
        self._readonly_limit = confirmed
        self.topic_table.reload()

    def _writer_started(self) -> bool:
        """Read-only openers that found no writer: whether one has started since (looked for
        at most every WRITER_PROBE_S seconds); from then on it is followed like one found at
        open. Without this, such a reader stayed at the log end it had found."""
        now = time.monotonic()
        if now < self._next_writer_probe:
            return False
        self._next_writer_probe = now + WRITER_PROBE_S
        self._live_writer = writer_alive(self.path) and self.state.open()
        return self._live_writer

    def _start_services(self) -> None:
        background.start_services(self)

    def _write_checkpoint(self, clean_end: int) -> None:
        """Flush queues and index, then record how far they are durable."""
        background.write_checkpoint(self, clean_end)

    # ------------------------------------------------------------------ state

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnlyStoreError(f"store {self.path} was opened read-only")

    def confirmed_offset(self) -> int:
        """What consumers may see: the log end (async flush) or the flushed offset (sync)."""
        if self.readonly:
            self._refresh_readonly()
            return self._readonly_limit
        # Not the log's own end: mid-append that moves record by record, also over records a
        # batch refused for a full disk is about to take back, and dispatch must never read them.
        if self._group_commit is not None:
            return min(self._group_commit.flushed, self._appended_end)
        return self._appended_end

    def min_commitlog_offset(self) -> int:
        return self.log.min_offset()

    def first_commitlog_offset(self) -> int:
        """The smallest commit-log offset ``read_at`` and ``scan`` can answer: the tier's
        oldest record where retention deleted local files the tier holds, else the log's."""
        self._check_open()
        low = self._local_min_phys()
        h = self._tier_history() if low > 0 else None
        older = h.min_commitlog_offset() if h is not None else None
        return low if older is None else min(low, older)

    def max_commitlog_offset(self) -> int:
        return self.log.max_offset()

    def flushed_offset(self) -> int:
        return self.log.flushed_offset()

    # ------------------------------------------------------------------ put

    def put(self, msg: Message) -> PutResult:
        """Append one message (the batch of one)."""
        return self.put_batch((msg,))[0]

    def check_batch(self, msgs: Sequence[Message]) -> None:
        """Raise what ``put_batch(msgs)`` would raise for its input (InvalidInputError and
        subclasses), writing nothing: a caller appending one large job in several batches
        checks all of them first."""
        batch = self._encoder.prepare(list(msgs))
        if len(batch):
            batch.choose_queues(self.topic_table.queues, self.config.default_queues, {}, {})

    def put_batch(self, msgs: Sequence[Message]) -> PutResults:
        """Append messages in order; all get the same store timestamp. Returns one
        ``PutResult`` per message (a ``PutResults`` sequence, made when first read).

        Invalid input raises (InvalidInputError and subclasses) before anything is written.
        """
        self._check_writable()
        if isinstance(msgs, Message):
            msgs = (msgs,)
        elif not isinstance(msgs, (list, tuple)):
            try:
                msgs = list(msgs)  # any iterable of messages (a generator, a deque, ...)
            except TypeError:
                raise InvalidInputError(f"put_batch takes an iterable of strata.Message, got "
                                        f"{type(msgs).__name__}") from None
        batch = self._encoder.prepare(msgs)
        return self._put_prepared(batch, msgs)

    def put_columns(self, topic: str, queue_id: int | None, bodies, *, keys=None, tags=None,
                    properties=None, born_timestamps=None) -> PutResults:
        """Append a batch given as columns, one item per message, all to ``topic`` and queue
        ``queue_id`` (None: round-robin over the topic's queues, as ``put_batch``). The records
        are the ones ``put_batch`` writes for ``Message(topic, body, keys=..., tags=...,
        properties=..., born_timestamp=...)`` of the same values, encoded in one compiled pass;
        results, durability (group commit under sync flush) and errors are ``put_batch``'s.

        Columns (each of ``len(bodies)`` items; a ``strata.format.columns.BytesColumn`` — one
        buffer and n + 1 offsets, e.g. an Arrow binary array's — or a Python sequence):

        - ``bodies``: each message's body (bytes-like items).
        - ``keys``: None (no keys), or a BytesColumn of one UTF-8 key per message (an empty item:
          no key), or a sequence holding per message None, one key (str, or UTF-8 bytes) or a
          list/tuple of keys. Each key is indexed for ``query`` (at most 65535 bytes).
        - ``tags``: None, or one tag per message (BytesColumn of UTF-8 or str / None items;
          empty: no tag).
        - ``properties``: None, or per message the user properties: a BytesColumn of
          pre-encoded property sections (entries back to back, each a little-endian u16 name
          length, the UTF-8 name, a u16 value length, the UTF-8 value: docs/format.md's
          properties encoding; empty: none; names KEYS and TAGS refused), or a sequence of
          mappings of str to str (or None).
        - ``born_timestamps``: None (0 for all), or ms since the epoch per message (a numpy
          integer array or a sequence of int / None).

        Invalid input raises (InvalidInputError and subclasses, naming the message) before
        anything is written."""
        self._check_writable()
        batch = self._encoder.prepare_columns(topic, bodies, keys=keys, tags=tags,
                                              properties=properties,
                                              born_timestamps=born_timestamps,
                                              queue_id=queue_id)
        return self._put_prepared(batch, None)

    def _put_prepared(self, batch, msgs: Sequence[Message] | None) -> PutResults:
        """Append a prepared batch (``put_batch``'s and ``put_columns``' common part)."""
        return put_path.put_prepared(self, batch, msgs)

    def _wait_for_dispatch(self, limit: int, *, helps: bool = True) -> None:
        """Back-pressure on the dispatch pipeline (``put_path.wait_for_dispatch``)."""
        put_path.wait_for_dispatch(self, limit, helps=helps)

    # ------------------------------------------------------------------ read

    def read_at(self, commitlog_offset: int) -> rec.StoredMessage | None:
        """The message whose record starts at ``commitlog_offset``, or None; CorruptRecordError
        (naming the offset) if the record there is damaged."""
        return read_path.read_at(self, commitlog_offset)

    def _read_record(self, offset: int) -> rec.StoredMessage | None:
        """The record at commit-log ``offset``: from the tier where retention deleted it."""
        return read_path.read_record(self, offset)

    def get_by_id(self, msg_id: str) -> rec.StoredMessage | None:
        """The message with this offset message id, or None; CorruptRecordError (naming the
        commit-log offset) if the record there is damaged."""
        return read_path.get_by_id(self, msg_id)

    def scan(self, from_offset: int = 0, *, to_offset: int | None = None,
             verify_crc: bool = False,
             on_damage: Callable[[int, str], None] | None = None
             ) -> Iterator[rec.StoredMessage]:
        """Every message from ``from_offset`` on, in log order. A damaged record (one that
        fails its checks or cannot be decoded) is skipped with a logged error naming its
        offset (or handed to ``on_damage(offset, error)`` instead), and the scan goes on at the
        next good record. CRCs are checked with ``verify_crc`` or the store's
        ``verify_crc_on_read``."""
        return read_path.scan(self, from_offset, to_offset=to_offset, verify_crc=verify_crc, on_damage=on_damage)

    def _scan_parts(self, from_offset: int, to_offset: int | None, verify_crc: bool,
                    on_damage: Callable[[int, str], None] | None) -> Iterator[Iterable]:
        """What ``scan`` yields, a part at a time: the tier's history, then the local log's
        batches (the limit is taken when the scan starts)."""
        return read_path.scan_parts(self, from_offset, to_offset, verify_crc, on_damage)

    # ------------------------------------------------------------------ topics and queues

    def create_topic(self, topic: str, queues: int | None = None,
                     message_type: TopicType | str | None = None) -> bool:
        """Create ``topic`` with ``queues`` queues (default ``config.default_queues``) that
        accepts messages of ``message_type`` (a TopicType or its name: normal, fifo, delay,
        transaction; default normal). The broker checks sends against the type; the
        embedded put accepts any message into any topic.

        Returns False if it exists already with ``queues`` queues (or ``queues`` is None) and
        ``message_type`` (or ``message_type`` is None). An existing topic with another count
        or type raises TopicExistsError naming its own and changes nothing:
        ``set_queue_count`` adds queues; a type never changes.
        """
        return topic_admin.create_topic(self, topic, queues, message_type)

    def topic_type(self, topic: str) -> TopicType | None:
        """The message type ``topic`` accepts (None if there is no such topic)."""
        self._check_open()
        if self.readonly:
            self.topic_table.reload()
        return self.topic_table.type_of(topic)

    def set_queue_count(self, topic: str, queues: int) -> int:
        """Give an existing ``topic`` more queues (RocketMQ's topic update); returns the count.

        Queues are only ever added: fewer would strand the messages of the dropped ones, so a
        smaller count is refused. New queues start empty at offset 0; round-robin and
        ``shard_key`` placement use the new count from the next put on (a key may move to
        another queue, as in RocketMQ).
        """
        return topic_admin.set_queue_count(self, topic, queues)

    def delete_topic(self, topic: str) -> bool:
        """Forget a topic: its queues go at once; its records age out with the log."""
        return topic_admin.delete_topic(self, topic)

    def topics(self) -> list[str]:
        """Names of all topics, sorted."""
        self._check_open()
        if self.readonly:
            self.topic_table.reload()
        return sorted(self.topic_table.queues)

    def queue_count(self, topic: str) -> int:
        """Number of queues of ``topic`` (0 if there is no such topic)."""
        self._check_open()
        if self.readonly:
            self.topic_table.reload()
        return self.topic_table.queues.get(topic, 0)

    def _queue(self, topic: str, queue_id: int):
        return read_path.queue(self, topic, queue_id)

    def _readonly_min_offset(self) -> int:
        """Read-only openers: the log's minimum as the writer last published it."""
        return read_path.readonly_min_offset(self)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The smallest queue offset still stored (0 for an unknown or empty queue)."""
        return read_path.min_offset(self, topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset (= number of messages ever dispatched to the queue)."""
        return read_path.max_offset(self, topic, queue_id)

    def _store_time_at(self, phys: int) -> int:
        return read_path.store_time_at(self, phys)

    def earliest_time(self, topic: str, queue_id: int) -> int:
        """Store time (ms) of the oldest message still in the queue; -1 if none."""
        return read_path.earliest_time(self, topic, queue_id)

    # ------------------------------------------------------------------ tiered history

    def _tier_history(self) -> tier_link.TierHistory | None:
        """The tier's history of this store (None without a tier); a read-only opener makes
        its own, on first use, from the tier the store remembers."""
        return read_path.tier_history(self)

    def _local_min_phys(self) -> int:
        """The first commit-log offset still in the local files."""
        return read_path.local_min_phys(self)

    def _tier_older(self, topic: str, queue_id: int,
                    local_min: int) -> tier_link.TierHistory | None:
        """The tier's history if it holds messages of the queue below ``local_min`` (the
        queue's first local offset), else None."""
        return read_path.tier_older(self, topic, queue_id, local_min)

    def _get_from_tier(self, h: tier_link.TierHistory, topic: str, queue_id: int,
                       offset: int, max_messages: int, wanted: frozenset[str] | None,
                       local_min: int, mx: int) -> GetResult:
        """``get`` below the queue's first local offset: the tier answers. A damaged tier
        record is passed over and listed in ``corrupt`` (naming the tier object)."""
        return read_path.get_from_tier(self, h, topic, queue_id, offset, max_messages, wanted, local_min, mx)

    def wait_dispatched(self, timeout: float = 30.0) -> bool:
        """Block until queues and index cover everything confirmed so far."""
        self._check_open()
        if self.readonly or self._reput is None:
            return True
        target = self.confirmed_offset()
        deadline = time.monotonic() + timeout
        while self._reput.reput_offset < target:
            self._reput.wakeup()
            if self._reput.error is not None:
                raise self._reput.error
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def dispatched_offset(self) -> int:
        """The commit-log offset up to which records have reached their consume queues (and
        so ``get`` finds them); ``confirmed_offset()`` minus what dispatch still has to do."""
        if self.readonly:
            _pid, confirmed, dispatched, _m = self.state.read() if self._live_writer \
                else (0, self._readonly_limit, self._readonly_limit, 0)
            return min(confirmed, dispatched)
        return self._reput.reput_offset if self._reput is not None else self.confirmed_offset()

    def wait_index_rebuilt(self, timeout: float | None = None) -> bool:
        """Block until a background rebuild of the key index (an open that found a large
        part of it lost) is done; True when there is none or it finished in time."""
        self._check_open()
        r = self._index_rebuild
        if r is None:
            return True
        return r.done.wait(timeout) and not r.active

    def dispatch_behind_bytes(self) -> int:
        if self.readonly:
            _pid, confirmed, dispatched, _m = self.state.read() if self._live_writer \
                else (0, 0, 0, 0)
            return max(0, confirmed - dispatched)
        return self._reput.behind_bytes() if self._reput is not None else 0

    @staticmethod
    def _parse_tags(tags) -> frozenset[str] | None:
        return read_path.parse_tags(tags)

    def get(self, topic: str, queue_id: int, offset: int, max_messages: int = 32, *,
            tags=None) -> GetResult:
        """Up to ``max_messages`` messages of a queue from ``offset``, optionally by tag."""
        return read_path.get(self, topic, queue_id, offset, max_messages, tags=tags)

    def get_columns(self, topic: str, queue_id: int, offset: int, max_messages: int = 1024
                    ) -> arrow_read.ColumnsResult:
        """``get`` for consumers that want arrays: up to ``max_messages`` messages of a queue
        from ``offset`` as one Arrow record batch (``strata.store.arrow_read.schema()``:
        queue and commit-log offsets, store and born timestamps, body, keys, the encoded
        properties), with ``get``'s status and offsets. Each record is checked as ``get``
        checks it (CRC32C with ``verify_crc_on_read``) and its body and properties are copied
        once, in compiled code, into the buffers the Arrow arrays wrap. Records ``get`` would
        pass over as damaged are left out the same way (that case, and reads from a tier, go
        through ``get``'s messages). Needs pyarrow."""
        return read_path.get_columns(self, topic, queue_id, offset, max_messages)

    def _first_unit_in_flight(self, topic: str, queue_id: int, offset: int, rows: np.ndarray,
                              phys: np.ndarray, present: np.ndarray, limit: int,
                              leads: np.ndarray) -> int | None:
        """Read-only openers: the index among units ``rows`` (their positions after
        ``offset``; records read up to commit-log offset ``limit``, ``present`` where an
        intact record was found) of the first whose consume-queue unit does not lead to its
        own record (``leads`` False); None if all do.

        The writer copies a run of units with one memcpy, whose stores can land in any order,
        so for an instant a unit can show its size while its commit-log offset is still zero
        or half written: it would lead to another queue's record, an older record of this
        queue, or none. While a writer holds the store, such a unit is one it is still
        copying, and the answer stops before it (the next get reads it complete), as it does
        before a unit whose record lies past what this opener may read yet. With no writer it
        can only be damage, and is reported instead of answered with the wrong message.
        """
        return read_path.first_unit_in_flight(self, topic, queue_id, offset, rows, phys, present, limit, leads)

    def query(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
              max_results: int = 64) -> list[rec.StoredMessage]:
        """Messages of ``topic`` with key (or unique key) ``key`` stored in [begin, end] ms,
        newest first. Only exact topic and key matches are returned; a damaged record is
        passed over (and logged), never returned."""
        return read_path.query(self, topic, key, begin_ms=begin_ms, end_ms=end_ms, max_results=max_results)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int,
                        boundary: str = "lower") -> int:
        """Queue offset of a store time: ``lower`` = first message at or after it, ``upper`` =
        last message at or before it (binary search over store time)."""
        return read_path.offset_for_time(self, topic, queue_id, timestamp_ms, boundary)

    def clean_expired(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Run one retention pass now (as if at a deletion hour); returns files deleted.

        ``force=True`` deletes the oldest commit-log files (at most
        ``max_files_deleted_per_run``, never the active one) whether expired or not: an
        operator's way out of a full disk, at the price of those messages."""
        self._check_writable()
        return self.retention.run_once(now_ms, manual=True, force=force)

    # ------------------------------------------------------------------ durability / lifetime

    def flush(self) -> int:
        """Make everything appended so far durable; returns the flushed offset."""
        self._check_open()
        if self.readonly:
            return self.confirmed_offset()
        flushed = self.log.flush(0)
        if self._group_commit is not None:
            # until the group commit counts it too (readers see up to its offset): not the
            # puts' sync_flush_timeout_ms, which a flush in progress can outlast under load
            self._group_commit.wait_for(self.log.max_offset(), timeout=FLUSH_WAIT_S)
        return flushed

    def tier_sync(self, timeout_s: float = 60.0) -> None:
        """Upload everything confirmed now to the tier; return when the tier holds it
        (TierUnavailableError, naming the last failure, after ``timeout_s``)."""
        self._check_writable()
        if self.tier is None:
            raise InvalidInputError(f"store {self.path} has no tier (StoreConfig.tier_url)")
        self.tier.sync(timeout_s)

    def _stop_services(self) -> None:
        if self._index_rebuild is not None:
            self._index_rebuild.stop()
        if self.tier is not None:
            self.tier.stop()
            self.tier = None
        if self.retention is not None:
            self.retention.stop()
            self.retention = None
        if self._reput is not None:
            self._reput.stop()
        if self._flusher is not None:
            self._flusher.stop()
            self._flusher = None
        if self._group_commit is not None:
            self._group_commit.stop()
            self._group_commit = None

    def close(self) -> None:
        """Flush, seal, write the clean-shutdown checkpoint and release the directory."""
        if self._closed:
            return
        if self.readonly:
            self._closed = True
            self._release_files()
            return
        with self._put_lock:
            self._closed = True
        try:
            self._stop_services()
            self.log.flush(0)
            try:
                if self._reput is not None:
                    self._reput.catch_up(self.log.max_offset())
                end = self.log.max_offset()
                self._write_checkpoint(clean_end=end)
                self.abort_marker.remove()
            except OSError as exc:
                if not isinstance(disk_full_or_same(exc, ""), DiskFullError):
                    raise
                # The log is flushed; without the clean-shutdown checkpoint the next open
                # recovers from it as after a crash, and loses nothing.
                log.warning("store %s: closed without a clean-shutdown checkpoint, the disk is "
                            "full (%s); the next open recovers from the log", self.path, exc)
        finally:
            self._release_files()

    def _release_files(self) -> None:
        """Unmap and close every file; the writer also gives up the directory lock."""
        if self._history is not None:
            self._history.close()
            self._history = None
        self.queues.close()
        self.key_index.close()
        self.log.close()
        self.state.close()
        if self._lock.held:
            self._lock.release()

    def _abandon(self, *, checkpointed: bool = False) -> None:
        """Tests: stop as a crash would (no flush, no checkpoint, abort marker left behind).
        With ``checkpointed``, the crash comes right after a checkpoint that covers every
        record appended, flushed and dispatched (what a background checkpoint would write)."""
        if self._closed:
            return
        with self._put_lock:
            self._closed = True
        self._stop_services()  # stopping a service never flushes
        if checkpointed:
            self._reput.catch_up(self.log.max_offset())
            self.log.flush(0)
            self._write_checkpoint(clean_end=-1)
        self._release_files()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "readonly" if self.readonly else "writer"
        return f"<MessageStore {self.path} {mode} {'closed' if self._closed else 'open'}>"
