"""The dispatch pipeline: a reput service follows the commit log up to the confirmed offset
and hands each batch of records to a chain of dispatchers (consume queues, key index, ...).

Every dispatcher must be idempotent: after a crash the pipeline replays from the last
checkpointed offset, so a record may be dispatched twice.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Protocol

from strata.index.dispatch_batch import DispatchBatch, TopicNames, read_batch
from strata.log.commit_log import CommitLog
from strata.log.record_fields import load_reader

log = logging.getLogger(__name__)

TX_TYPE_MASK = 0xC
TX_PREPARED = 0x4
TX_ROLLBACK = 0xC
RETRY_S = 0.1          # a failed dispatch is tried again this often


@dataclass(slots=True)
class DispatchRequest:
    """What dispatchers learn about one record, without its body."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    tag_hash: int
    store_timestamp: int
    keys: list[str]
    uniq_key: str | None
    sys_flag: int


class Dispatcher(Protocol):
    """Takes a batch of records in log order (``batch.requests()`` gives them one by one)."""

    def dispatch(self, batch: DispatchBatch) -> None: ...


class ReputService:
    """Follows the commit log and feeds the dispatcher chain, in a background thread."""

    def __init__(self, clog: CommitLog, confirmed: Callable[[], int],
                 dispatchers: list[Dispatcher], start_offset: int, *,
                 batch_records: int = 4096,
                 on_advance: Callable[[int], None] | None = None) -> None:
        self.log = clog
        self.confirmed = confirmed
        self.dispatchers = dispatchers
        self.reput_offset = start_offset
        self.batch_records = batch_records
        self.on_advance = on_advance
        self.dispatched_records = 0
        self._names = TopicNames()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        # waiters for an offset (wait_for): told on each advance and on a failure, only
        # when one waits (the dispatch thread pays one int check per batch otherwise)
        self._advanced = threading.Condition(threading.Lock())
        self._waiters = 0
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def running(self) -> bool:
        """The background thread is started and not stopped."""
        return self._thread is not None and not self._stop.is_set()

    def behind_bytes(self) -> int:
        return max(0, self.confirmed() - self.reput_offset)

    def dispatch_once(self, limit: int | None = None) -> int:
        """Dispatch one batch; returns the number of records dispatched."""
        with self._lock:
            end = self.confirmed() if limit is None else limit
            start = max(self.reput_offset, self.log.min_offset())
            if start >= end:
                if start > self.reput_offset:
                    self.reput_offset = start
                return 0
            batch, nxt = read_batch(self.log, start, end, self.batch_records, self._names)
            if len(batch):
                for d in self.dispatchers:
                    d.dispatch(batch)
            self.reput_offset = nxt
            self.dispatched_records += len(batch)
        if self._waiters:
            self._notify()
        if self.on_advance is not None:
            self.on_advance(nxt)
        return len(batch)

    def _notify(self) -> None:
        with self._advanced:
            self._advanced.notify_all()

    def wait_for(self, offset: int, timeout: float, *, fail_fast: bool = True) -> bool:
        """Block until records up to commit-log ``offset`` are dispatched (True), or
        ``timeout`` seconds pass (False), or — with ``fail_fast`` — the dispatcher is
        failing (``error`` set: False at once). Woken by each advance of the dispatcher
        (and by its failures), never by polling. Wakes the dispatch thread first: the
        caller wants progress."""
        if self.reput_offset >= offset:
            return True
        self._wake.set()
        with self._advanced:
            self._waiters += 1
            try:
                return self._advanced.wait_for(
                    lambda: self.reput_offset >= offset or
                    (fail_fast and self.error is not None), timeout) \
                    and self.reput_offset >= offset
            finally:
                self._waiters -= 1

    def catch_up(self, limit: int | None = None) -> int:
        """Dispatch synchronously until the confirmed offset (or ``limit``) is reached."""
        n = 0
        target = self.confirmed() if limit is None else limit
        while self.reput_offset < target:
            before = self.reput_offset
            n += self.dispatch_once(target)
            if self.reput_offset == before:
                break
        return n

    def help_once(self) -> int:
        """One batch dispatched on the calling thread (a producer that finds the dispatcher
        behind; it first waits for a batch in progress, which hands that batch's thread the
        GIL), unless the service is failing. Errors are recorded and logged here like the
        service's own, never raised to the caller."""
        if self.error is not None:
            return 0
        try:
            return self.dispatch_once()
        except Exception as exc:
            self._failed(exc)
            return 0

    def _failed(self, exc: BaseException) -> None:
        self.error = exc
        log.exception("dispatch failed at offset %d", self.reput_offset)
        self._notify()     # waiters for an offset learn of it now, not at their timeout

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="strata-reput", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        """New records are confirmed (a put's batch, a group commit's fsync): one
        ``Event.set`` per batch, which is all the dispatch thread waits for when idle."""
        self._wake.set()

    def _run(self) -> None:
        """Dispatch while there is work; idle, sleep until ``wakeup`` (no periodic wake:
        nothing but new confirmed records gives it work). The flag is cleared before the
        confirmed offset is read, so a wakeup that comes while a batch is dispatched is
        seen by the next round, never lost. After a failure (a full disk, say: nothing
        announces that it passed) it tries again every RETRY_S."""
        load_reader()
        while not self._stop.is_set():
            before = self.reput_offset
            self._wake.clear()
            try:
                n = self.dispatch_once()
            except BaseException as exc:
                self._failed(exc)
                self._stop.wait(RETRY_S)
                continue
            if self.error is not None and self.reput_offset != before:
                log.warning("dispatch moving again at offset %d", self.reput_offset)
                self.error = None  # the failure passed (e.g. space freed): stop reporting it
            if n == 0 and self.reput_offset == before:
                self._wake.wait()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._notify()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
