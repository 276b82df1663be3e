"""``MessageStore``: the embedded store, a facade over a few rooms (docs/architecture.md).

It builds the parts of one store directory (commit log, consume queues, key index, topic
table, checkpoint files), opens and closes them through ``lifecycle``, and binds the rooms'
functions as its methods: ``put_path`` (appends), ``read_path`` (reads, answered by
``history``, which alone stitches the local files and the tier), ``topic_admin`` (topics) and
``background`` (flush, dispatch, checkpoint, retention and tier services)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

from strata.errors import (InvalidInputError, ReadOnlyStoreError, StoreClosedError,
                           StoreNotFoundError)
from strata.files.checkpoint import AbortMarker, CheckpointFile, StatePage
from strata.files.flush import AsyncFlushService, GroupCommitService
from strata.files.io import FileOps
from strata.files.io import file_ops as installed_file_ops
from strata.files.lock import DirectoryLock
from strata.files.layout import (COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR,  # noqa: F401
                                 STORE_MARKERS, StoreLayout)
from strata.format import record as rec
from strata.index.derived_check import DerivedSummaryFile
from strata.index.dispatch import ReputService
from strata.index.key_index import KeyIndex
from strata.index.key_index_rebuild import KeyIndexRebuild
from strata.index.queues import ConsumeQueueSet
from strata.log.commit_log import CommitLog
from strata.log.recovery import RecoveryReport
from strata.store import background, lifecycle, put_path, read_path, tier_link, topic_admin
from strata.store import queue_bounds as bounds
from strata.store.config import StoreConfig
from strata.store.geometry import stored_config
from strata.store.history import StoreHistory
from strata.store.lifecycle import WRITER_PROBE_S, Lifecycle, writer_alive  # noqa: F401
from strata.store.message import Message
from strata.store.prepared import Encoder
from strata.store.put_path import DISPATCH_HELP_SHARE, DISPATCH_STALL_S, now_ms  # noqa: F401
from strata.store.queue_source import MAX_SCAN_UNITS  # noqa: F401 (re-exported)
from strata.store.retention import RetentionService
from strata.store.tier_config import with_stored_tier
from strata.store.topics import TopicTable
from strata.store.unit_repair import UnitRepairs


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


def _check_directory(path: Path, readonly: bool, create: bool) -> None:
    """Refuse a path that is not a store (or, for a writer, an empty or new directory)."""
    if not path.is_dir():
        if path.exists():
            raise StoreNotFoundError(f"{path} exists and is not a directory")
        if readonly or not create:
            raise StoreNotFoundError(f"no strata store at {path}")
        path.mkdir(parents=True)
    elif not StoreLayout(path).is_store():
        if readonly:
            raise StoreNotFoundError(
                f"{path} is not a strata store (no {COMMITLOG_DIR}/ inside)")
        foreign = [p.name for p in path.iterdir() if p.name not in STORE_MARKERS]
        if foreign:
            raise StoreNotFoundError(
                f"{path} is not empty and is not a strata store (it holds "
                f"{', '.join(sorted(foreign)[:3])}{', ...' if len(foreign) > 3 else ''}); "
                "give an empty or new directory")


class MessageStore:
    """An embedded message store in one directory. Open it with ``strata.open``."""

    def __init__(self, path: str | os.PathLike, config: StoreConfig | None = None, *,
                 readonly: bool = False, file_ops: FileOps | None = None,
                 create: bool = True, local_only: bool = False,
                 tier: tier_link.TierSupport | None = None) -> None:
        """``local_only``: reads answer from the local files alone, never from the tier (for
        readers that read the tier themselves, as the Spark source does in its own tasks).
        ``tier``: how a store with a ``tier_url`` gets its tier (``strata.open`` passes
        ``strata.tiered.SUPPORT``); a writer with a tier refuses to open without it."""
        self.path = Path(path)
        self._explicit_config = config is not None
        if config is None:   # the sizes the store was made with, defaults for the rest
            config = stored_config(self.path) if self.path.is_dir() else StoreConfig()
        if not isinstance(config, StoreConfig):
            raise InvalidInputError(f"config must be a strata.StoreConfig, got "
                                    f"{type(config).__name__}")
        config.validate()
        # the tier the store remembers (config/tier.json): its history stays readable
        self.config = config = with_stored_tier(self.path, config)
        self.readonly = readonly
        self.file_ops = file_ops or installed_file_ops()
        self.life = Lifecycle(self)
        self._lock = DirectoryLock(self.path)
        self._msg_id_prefix = rec.msg_id_prefix(config.store_host)
        self.dispatch_wait_s = 0.0  # time puts spent waiting for the dispatch pipeline
        self.dispatch_helped = 0  # records producers dispatched themselves (it was behind)
        self._queue_next: dict[tuple[str, int], int] = {}
        self._round_robin: dict[str, int] = {}
        self._flusher: AsyncFlushService | None = None
        self._group_commit: GroupCommitService | None = None
        self._last_checkpoint = 0.0
        self._appended_end = 0   # the log's end after the last whole put (what dispatch may read)
        self._checkpoint_refused = False    # the last periodic checkpoint found no room
        self._live_writer = False
        self._next_writer_probe = 0.0   # read-only openers with no writer: when to look again
        self.recovery_report: RecoveryReport | None = None
        self.tier: tier_link.TierLink | None = None  # a writer's tier (README "Tiered storage")
        self.history = StoreHistory(self, tier, local_only)
        self.repairs = UnitRepairs()   # units reads found damaged, re-derived by the writer
        _check_directory(self.path, readonly, create)

        layout = StoreLayout(self.path)
        self.topic_table = TopicTable(self.path, readonly=readonly, file_ops=self.file_ops,
                                      queues_dir=layout.consumequeue)
        self.log = CommitLog(layout.commitlog, config.segment_size, readonly=readonly,
                             file_ops=self.file_ops, prefault=config.prefault,
                             preallocate=config.preallocate)
        self._encoder = Encoder(config.store_host, config.max_body_size,
                                self.log.max_record_size(), config.segment_size)
        self.queues = ConsumeQueueSet(layout.consumequeue, config.consume_queue_units,
                                      readonly=readonly, file_ops=self.file_ops)
        self.key_index = KeyIndex(layout.index, slots=config.index_slots,
                                  entries=config.index_entries, readonly=readonly)
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
            lifecycle.open_readonly(self)
        else:
            lifecycle.open_writer(self)
        self.life.closed = False

    # ------------------------------------------------------------------ state

    def _on_dispatched(self, offset: int) -> None:
        if self.state.is_open:
            self.state.set_dispatched(offset)
        for listener in self.dispatch_listeners:
            listener(offset)

    def _refresh_readonly(self) -> None:
        """Read-only openers: follow the writer's confirmed offset and new segments."""
        lifecycle.refresh_readonly(self)

    def _write_checkpoint(self, clean_end: int) -> None:
        """Flush queues and index, then record how far they are durable."""
        background.write_checkpoint(self, clean_end)

    def _check_open(self) -> None:
        if self.life.closed:
            raise StoreClosedError(f"store {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnlyStoreError(f"store {self.path} was opened read-only")

    @property
    def fsyncs(self) -> int:
        """fsyncs the sync-flush group commit did since open (0 under async flush): with
        the puts counted by the caller, how many puts each fsync covered."""
        gc = self._group_commit
        return gc.fsyncs if gc is not None else 0

    @property
    def follows_writer(self) -> bool:
        """Read-only openers: whether a live writer holds the store (this view follows it)."""
        return self._live_writer

    def confirmed_offset(self) -> int:
        """What consumers may see: the log end (async flush) or the flushed offset (sync)."""
        if self.readonly:
            lifecycle.refresh_readonly(self)
            return self._readonly_limit
        # Not the log's own end: mid-append that moves record by record, also over records a
        # batch refused for a full disk is about to take back, and dispatch must never read them.
        if self._group_commit is not None:
            return min(self._group_commit.flushed, self._appended_end)
        return self._appended_end

    def min_commitlog_offset(self) -> int:
        return self.log.min_offset()

    def max_commitlog_offset(self) -> int:
        return self.log.max_offset()

    def flushed_offset(self) -> int:
        return self.log.flushed_offset()

    first_commitlog_offset = read_path.first_commitlog_offset

    # ------------------------------------------------------------------ the rooms' methods

    put = put_path.put
    check_batch = put_path.check_batch
    put_batch = put_path.put_batch
    put_columns = put_path.put_columns
    put_many = put_path.put_many
    _put_prepared = put_path.put_prepared
    _wait_for_dispatch = put_path.wait_for_dispatch

    read_at = read_path.read_at
    get_by_id = read_path.get_by_id
    scan = read_path.scan
    get = read_path.get
    get_columns = read_path.get_columns
    query = read_path.query
    offset_for_time = read_path.offset_for_time
    min_offset = read_path.min_offset
    max_offset = read_path.max_offset
    earliest_time = read_path.earliest_time
    _queue = read_path.queue
    _readonly_min_offset = read_path.readonly_min_offset
    _store_time_at = read_path.store_time_at
    _parse_tags = staticmethod(read_path.parse_tags)

    def _local_min_phys(self) -> int:
        """The first commit-log offset still in the local files."""
        return self.history.local_min_phys()

    create_topic = topic_admin.create_topic
    set_queue_count = topic_admin.set_queue_count
    delete_topic = topic_admin.delete_topic
    topic_type = topic_admin.topic_type
    topics = topic_admin.topics
    queue_count = topic_admin.queue_count
    queue_counts = bounds.queue_counts
    queue_bounds = bounds.queue_bounds

    wait_dispatched = background.wait_dispatched
    dispatched_offset = background.dispatched_offset
    wait_index_rebuilt = background.wait_index_rebuilt
    wait_repaired = background.wait_repaired
    dispatch_behind_bytes = background.dispatch_behind_bytes
    flush = background.flush
    tier_sync = background.tier_sync
    clean_expired = background.clean_expired

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Flush, seal, write the clean-shutdown checkpoint and release the directory."""
        lifecycle.close(self)

    def _abandon(self, *, checkpointed: bool = False) -> None:
        """Tests: stop as a crash would (no flush, no checkpoint, abort marker left behind).
        With ``checkpointed``, the crash comes right after a checkpoint that covers every
        record appended, flushed and dispatched (what a background checkpoint would write)."""
        lifecycle.abandon(self, checkpointed)

    @property
    def closed(self) -> bool:
        return self.life.closed

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "readonly" if self.readonly else "writer"
        return f"<MessageStore {self.path} {mode} {'closed' if self.closed else 'open'}>"
