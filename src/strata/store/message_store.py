"""``MessageStore``: the embedded store, composed of the commit log, flush services, recovery,
the topic table and (from the queues layer) consume queues, key index and retention."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from crc32c import crc32c

from strata.errors import (DiskFullError, InvalidInputError, MessageTooLargeError,
                           ReadOnlyStoreError, StoreClosedError, StoreNotFoundError)
from strata.files.checkpoint import AbortMarker, CheckpointFile, StatePage
from strata.files.flush import AsyncFlushService, GroupCommitService
from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.files.lock import LOCK_NAME, DirectoryLock
from strata.format import record as rec
from strata.format.checkpoint import Checkpoint
from strata.log.commit_log import CommitLog
from strata.log.recovery import RecoveryReport, recover
from strata.store.config import StoreConfig
from strata.store.message import Message, PutResult, PutStatus
from strata.store.topics import TopicTable

log = logging.getLogger(__name__)

COMMITLOG_DIR = "commitlog"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def writer_alive(directory: Path) -> bool:
    """True if some process holds the store's writer lock right now."""
    path = Path(directory) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our shared lock, if we got one
    return False


class MessageStore:
    """An embedded message store in one directory. Open it with ``strata.open``."""

    def __init__(self, path: str | os.PathLike, config: StoreConfig | None = None, *,
                 readonly: bool = False, file_ops: FileOps | None = None,
                 create: bool = True) -> None:
        self.path = Path(path)
        self.config = config if config is not None else StoreConfig()
        if not isinstance(self.config, StoreConfig):
            raise InvalidInputError(f"config must be a strata.StoreConfig, got "
                                    f"{type(self.config).__name__}")
        self.config.validate()
        self.readonly = readonly
        self.file_ops = file_ops or DEFAULT_FILE_OPS
        self._closed = True
        self._put_lock = threading.Lock()
        self._lock = DirectoryLock(self.path)
        self._store_host = self.config.store_host
        self._store_host_bytes, self._store_host_v6 = rec.encode_host(self._store_host)
        self._msg_id_prefix = rec.msg_id_prefix(self._store_host)
        self._topic_bytes: dict[str, bytes] = {}
        self._host_cache: dict[tuple, tuple[bytes, bool]] = {}
        self._queue_next: dict[tuple[str, int], int] = {}
        self._round_robin: dict[str, int] = {}
        self._flusher: AsyncFlushService | None = None
        self._group_commit: GroupCommitService | None = None
        self._last_checkpoint = 0.0
        self._disk_full = False
        self._live_writer = False
        self.recovery_report: RecoveryReport | None = None

        if not self.path.is_dir():
            if readonly or not create:
                raise StoreNotFoundError(f"no strata store at {self.path}")
            self.path.mkdir(parents=True)
        elif readonly and not (self.path / COMMITLOG_DIR).is_dir() and not any(self.path.iterdir()):
            raise StoreNotFoundError(f"{self.path} is empty: no strata store there")
        elif not (self.path / COMMITLOG_DIR).is_dir() and any(
                p.name not in (LOCK_NAME,) for p in self.path.iterdir()) and readonly:
            raise StoreNotFoundError(f"{self.path} is not a strata store (no {COMMITLOG_DIR}/)")

        self.topics = TopicTable(self.path, readonly=readonly, file_ops=self.file_ops)
        self.log = CommitLog(self.path / COMMITLOG_DIR, self.config.segment_size,
                             readonly=readonly, file_ops=self.file_ops,
                             prefault=self.config.prefault, preallocate=self.config.preallocate)
        self.checkpoint = CheckpointFile(self.path, self.file_ops)
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
            self.topics.load()
            self.log.load()
            self.recovery_report = recover(self.log, cp, clean)
            self._after_log_recovered(cp)
            end = self.log.max_offset()
            # From here on a crash is unclean: the marker says so, the checkpoint loses its end.
            self.checkpoint.store(Checkpoint(flushed_offset=end, clean_end_offset=-1,
                                             physic_timestamp=self.log.last_store_timestamp,
                                             min_offset=self.log.min_offset()))
            self.abort_marker.create()
            self.state.open(confirmed=end, dispatched=end, min_offset=self.log.min_offset())
            self._start_services()
        except BaseException:
            self.log.close()
            self._lock.release()
            raise

    def _after_log_recovered(self, cp: Checkpoint | None) -> None:
        """Rebuild what is derived from the log (queue offsets)."""
        self._rebuild_queue_offsets()

    def _rebuild_queue_offsets(self) -> None:
        nxt: dict[tuple[str, int], int] = {}
        limit = self.log.max_offset()
        for seg, pos, _size in self.log.iter_records(self.log.min_offset(), limit):
            mm = seg.mm
            base = pos + 4096
            _t, qid, qoff, _p, _s, _ts = rec.peek(mm, base)
            start, n = rec.topic_span(mm, base)
            topic = mm[start:start + n].decode("utf-8")
            nxt[(topic, qid)] = qoff + 1
        self._queue_next = nxt

    def _open_readonly(self) -> None:
        self.topics.load()
        self.log.load()
        self._live_writer = writer_alive(self.path) and self.state.open()
        if not self._live_writer:
            cp = self.checkpoint.load()
            clean = not self.abort_marker.exists()
            self.recovery_report = recover(self.log, cp, clean, modify=False)
            self._readonly_limit = self.log.max_offset()
        self._refresh_readonly()

    def _refresh_readonly(self) -> None:
        """Read-only openers: follow the writer's confirmed offset and new segments."""
        if not self._live_writer:
            return
        _pid, confirmed, _disp, _min = self.state.read()
        last = self.log.segments.last()
        if last is None or confirmed > last.end_offset or confirmed > last.base_offset + last.committed:
            self.log.segments.refresh()
        for seg in self.log.segments.segments:
            seg.committed = max(0, min(seg.data_size, confirmed - seg.base_offset))
        self._readonly_limit = confirmed
        self.topics.reload()

    def _start_services(self) -> None:
        cfg = self.config
        if cfg.flush == "sync":
            self._group_commit = GroupCommitService(self.log.flush,
                                                    timeout_ms=cfg.sync_flush_timeout_ms,
                                                    after_flush=self._after_sync_flush)
            self._group_commit.start(self.log.max_offset())
        self._flusher = AsyncFlushService(self._background_flush,
                                          interval_ms=cfg.flush_interval_ms,
                                          least_pages=cfg.flush_least_pages,
                                          thorough_ms=cfg.flush_thorough_interval_ms)
        self._flusher.start()

    def _background_flush(self, least_pages: int) -> int:
        flushed = self.log.flush(least_pages)
        now = time.monotonic()
        if now - self._last_checkpoint >= self.config.checkpoint_interval_ms / 1000.0:
            self._last_checkpoint = now
            self.checkpoint.store(Checkpoint(flushed_offset=flushed, clean_end_offset=-1,
                                             physic_timestamp=self.log.last_store_timestamp,
                                             min_offset=self.log.min_offset()))
        return flushed

    def _after_sync_flush(self) -> None:
        self.state.set_confirmed(self._group_commit.flushed)

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
        if self._group_commit is not None:
            return min(self._group_commit.flushed, self.log.max_offset())
        return self.log.max_offset()

    def min_commitlog_offset(self) -> int:
        return self.log.min_offset()

    def max_commitlog_offset(self) -> int:
        return self.log.max_offset()

    def flushed_offset(self) -> int:
        return self.log.flushed_offset()

    # ------------------------------------------------------------------ put

    def _topic_encoded(self, topic: str) -> bytes:
        tb = self._topic_bytes.get(topic)
        if tb is None:
            tb = rec.encode_topic(topic)
            self._topic_bytes[topic] = tb
        return tb

    def _prepare(self, m: Message) -> list:
        """Validate and encode one message outside the put lock. Raises before any change."""
        if not isinstance(m, Message):
            raise InvalidInputError(f"expected a strata.Message, got {type(m).__name__}")
        tb = self._topic_encoded(m.topic)
        body = m.body
        if not isinstance(body, (bytes, bytearray, memoryview)):
            if isinstance(body, str):
                raise InvalidInputError("message body must be bytes; encode the str first "
                                        "(e.g. body.encode())")
            raise InvalidInputError(f"message body must be bytes, got {type(body).__name__}")
        if len(body) > self.config.max_body_size:
            raise MessageTooLargeError(
                f"message body of {len(body)} bytes exceeds max_body_size "
                f"{self.config.max_body_size}")
        if m.keys or m.tags is not None or m.properties:
            pb = rec.encode_properties(m.keys, m.tags, m.properties)
        else:
            pb = b""
        sys_flag = m.sys_flag & ~(rec.SYSFLAG_BORN_HOST_V6 | rec.SYSFLAG_STORE_HOST_V6)
        if m.born_host is None:
            bh, b6 = self._store_host_bytes, self._store_host_v6
        else:
            cached = self._host_cache.get(m.born_host)
            if cached is None:
                cached = rec.encode_host(m.born_host)
                self._host_cache[m.born_host] = cached
            bh, b6 = cached
        if b6:
            sys_flag |= rec.SYSFLAG_BORN_HOST_V6
        if self._store_host_v6:
            sys_flag |= rec.SYSFLAG_STORE_HOST_V6
        for name, v in (("flag", m.flag), ("reconsume_times", m.reconsume_times)):
            if not isinstance(v, int) or not -2**31 <= v < 2**31:
                raise InvalidInputError(f"{name} must be a 32-bit int, got {v!r}")
        born = m.born_timestamp
        if born is None:
            born = 0
        elif not isinstance(born, int) or born < 0:
            raise InvalidInputError(f"born_timestamp must be ms since the epoch, got {born!r}")
        qid = m.queue_id
        if qid is not None and (not isinstance(qid, int) or isinstance(qid, bool) or qid < 0):
            raise InvalidInputError(f"queue_id must be a non-negative int, got {qid!r}")
        tail = b"".join((bh, self._store_host_bytes, tb, pb, body))
        total = rec.HEADER_SIZE + len(tail) + rec.TRAILER_SIZE
        if total > self.log.max_record_size():
            raise MessageTooLargeError(f"record of {total} bytes cannot fit a segment of "
                                       f"{self.config.segment_size} bytes")
        return [total, qid, m.flag, 0, sys_flag, born, m.prepared_transaction_offset,
                m.reconsume_times, len(body), len(tb), len(pb), tail]

    def _choose_queue(self, m: Message, n_queues: int) -> int:
        if m.queue_id is not None:
            if m.queue_id >= n_queues:
                raise InvalidInputError(
                    f"queue_id {m.queue_id} does not exist: topic {m.topic!r} has "
                    f"{n_queues} queues (0..{n_queues - 1})")
            return m.queue_id
        if m.shard_key is not None:
            return crc32c(str(m.shard_key).encode("utf-8")) % n_queues
        i = self._round_robin.get(m.topic, 0)
        self._round_robin[m.topic] = i + 1
        return i % n_queues

    def put(self, msg: Message) -> PutResult:
        """Append one message (the batch of one)."""
        return self.put_batch((msg,))[0]

    def put_batch(self, msgs: Sequence[Message]) -> list[PutResult]:
        """Append messages in order; all get the same store timestamp.

        Invalid input raises (InvalidInputError and subclasses) before anything is written.
        """
        self._check_writable()
        if isinstance(msgs, Message):
            msgs = (msgs,)
        prepared = [self._prepare(m) for m in msgs]
        if not prepared:
            return []
        with self._put_lock:
            self._check_open()
            if self._disk_full:
                raise DiskFullError(
                    f"store {self.path}: disk usage is above the warning ratio "
                    f"{self.config.disk_warning_ratio:.0%}; puts are refused until space is "
                    "freed (stored data is safe)")
            topics = self.topics.queues
            default_q = self.config.default_queues
            queue_next = self._queue_next
            updates: dict[tuple[str, int], int] = {}
            for m, p in zip(msgs, prepared):
                n_q = topics.get(m.topic)
                if n_q is None:
                    n_q = self.topics.ensure(m.topic, default_q)
                qid = self._choose_queue(m, n_q)
                key = (m.topic, qid)
                nxt = updates.get(key)
                if nxt is None:
                    nxt = queue_next.get(key, 0)
                p[1] = qid
                p[3] = nxt
                updates[key] = nxt + 1
            store_ts = max(now_ms(), self.log.last_store_timestamp)
            offsets = self.log.append_batch(prepared, store_ts)
            queue_next.update(updates)
            end = self.log.max_offset()
            if self._group_commit is None:
                self.state.set_confirmed(end)
        status = PutStatus.OK
        if self._group_commit is not None:
            if not self._group_commit.wait_for(end):
                status = PutStatus.FLUSH_DISK_TIMEOUT
        prefix = self._msg_id_prefix
        return [PutResult(status, off, p[0], store_ts, m.topic, p[1], p[3], prefix)
                for m, p, off in zip(msgs, prepared, offsets)]

    # ------------------------------------------------------------------ read

    def read_at(self, commitlog_offset: int) -> rec.StoredMessage | None:
        """The message whose record starts at ``commitlog_offset``, or None."""
        self._check_open()
        if not isinstance(commitlog_offset, int) or isinstance(commitlog_offset, bool):
            raise InvalidInputError(f"commitlog_offset must be an int, got {commitlog_offset!r}")
        return self.log.read(commitlog_offset, self.confirmed_offset(),
                             verify_crc=self.config.verify_crc_on_read)

    def get_by_id(self, msg_id: str) -> rec.StoredMessage | None:
        """The message with this offset message id, or None."""
        self._check_open()
        _host, offset = rec.parse_msg_id(msg_id)
        m = self.log.read(offset, self.confirmed_offset(),
                          verify_crc=self.config.verify_crc_on_read)
        if m is None or m.msg_id != msg_id.upper():
            return None
        return m

    def scan(self, from_offset: int = 0, *, to_offset: int | None = None,
             verify_crc: bool = False) -> Iterator[rec.StoredMessage]:
        """Every message from ``from_offset`` on, in log order."""
        self._check_open()
        limit = self.confirmed_offset()
        if to_offset is not None:
            limit = min(limit, to_offset)
        for seg, pos, _size in self.log.iter_records(from_offset, limit, verify_crc=verify_crc,
                                                      strict=verify_crc):
            yield rec.decode_record(seg.mm, 4096 + pos)

    # ------------------------------------------------------------------ durability / lifetime

    def flush(self) -> int:
        """Make everything appended so far durable; returns the flushed offset."""
        self._check_open()
        if self.readonly:
            return self.confirmed_offset()
        flushed = self.log.flush(0)
        if self._group_commit is not None:
            self._group_commit.wait_for(self.log.max_offset())
        return flushed

    def _stop_services(self) -> None:
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
            self.log.close()
            self.state.close()
            return
        with self._put_lock:
            self._closed = True
        try:
            self._stop_services()
            flushed = self.log.flush(0)
            end = self.log.max_offset()
            last = self.log.segments.last()
            self.checkpoint.store(Checkpoint(
                flushed_offset=flushed, clean_end_offset=end,
                physic_timestamp=self.log.last_store_timestamp,
                min_offset=self.log.min_offset(),
                active_record_count=last.record_count if last else 0,
                active_min_timestamp=last.min_store_timestamp if last else 0,
                active_max_timestamp=last.max_store_timestamp if last else 0))
            self.abort_marker.remove()
        finally:
            self.log.close()
            self.state.close()
            self._lock.release()

    def _abandon(self) -> None:
        """Tests: stop as a crash would (no flush, no checkpoint, abort marker left behind)."""
        if self._closed:
            return
        with self._put_lock:
            self._closed = True
        if self._flusher is not None:
            self._flusher._stop.set()
            self._flusher._wake.set()
            self._flusher._thread.join()
            self._flusher = None
        if self._group_commit is not None:
            self._group_commit.stop()
            self._group_commit = None
        self.log.close()
        self.state.close()
        self._lock.release()

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


def open_store(path: str | os.PathLike, config: StoreConfig | None = None, *,
               readonly: bool = False, file_ops: FileOps | None = None) -> MessageStore:
    return MessageStore(path, config, readonly=readonly, file_ops=file_ops)


def iter_batches(items: Iterable, n: int) -> Iterator[list]:
    batch = []
    for it in items:
        batch.append(it)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch
