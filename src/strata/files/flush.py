"""Flush services: when page-cache writes become durable.

``AsyncFlushService`` (the default) flushes every ``interval_ms`` when at least ``least_pages``
pages are dirty, and everything every ``thorough_ms``. ``GroupCommitService`` serves
``flush="sync"``: a put waits until an fsync covers its bytes; puts waiting at the same time
share one fsync.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

# flush_fn(least_pages) -> the offset now durable. least_pages=0 flushes whatever is dirty.
FlushFn = Callable[[int], int]


class AsyncFlushService:
    """Background flusher on an interval, RocketMQ's FlushRealTimeService in spirit."""

    def __init__(self, flush_fn: FlushFn, *, interval_ms: int = 500, least_pages: int = 4,
                 thorough_ms: int = 10_000, after_flush: Callable[[], None] | None = None) -> None:
        self.flush_fn = flush_fn
        self.interval = interval_ms / 1000.0
        self.least_pages = least_pages
        self.thorough = thorough_ms / 1000.0
        self.after_flush = after_flush
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="strata-flush", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        last_thorough = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            now = time.monotonic()
            pages = self.least_pages
            if now - last_thorough >= self.thorough:
                pages, last_thorough = 0, now
            try:
                self.flush_fn(pages)
                if self.after_flush:
                    self.after_flush()
            except BaseException as exc:  # keep the service alive; surface at close
                self.error = exc
                log.exception("async flush failed")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()


class GroupCommitService:
    """Sync flush with group commit: concurrent waiters share one fsync.

    Each waiting producer blocks on a lock of its own that the flush thread releases once an
    fsync covers its offset (no herd of threads fighting over one condition). After an fsync
    releases several producers, the next fsync waits (at most ``MAX_GATHER_S``) until they and
    the producers that were already waiting are all waiting, so one fsync covers all of them
    instead of whichever came back first. A lone producer never waits for company.
    """

    MAX_GATHER_S = 0.002

    def __init__(self, flush_fn: FlushFn, *, timeout_ms: int = 5000,
                 after_flush: Callable[[], None] | None = None) -> None:
        self.flush_fn = flush_fn
        self.timeout = timeout_ms / 1000.0
        self.after_flush = after_flush
        self._cv = threading.Condition(threading.Lock())  # the flush thread waits on it
        self._requested = 0
        # (offset, gate, thread id) of each waiting producer; the gate is held until an fsync
        # covers it
        self._pending: list[tuple[int, threading.Lock, int]] = []
        # how many waiting producers are worth waking the flush thread for: 1 while it waits
        # for any request, more while it gathers (so it is not woken once per arrival)
        self._wake_at = 1
        self.flushed = 0
        self._stopped = False
        self.fsyncs = 0
        self.gathers = 0   # fsyncs that first waited for released producers to come back
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="strata-group-commit",
                                        daemon=True)

    def start(self, flushed: int) -> None:
        self.flushed = flushed
        self._thread.start()

    def wait_for(self, offset: int, timeout: float | None = None) -> bool:
        """Block until the durable offset reaches ``offset``; False past the timeout."""
        deadline = self.timeout if timeout is None else timeout
        gate = threading.Lock()
        gate.acquire()
        entry = (offset, gate, threading.get_ident())
        with self._cv:
            if self.flushed >= offset:
                return True
            if self._stopped:
                return False
            if offset > self._requested:
                self._requested = offset
            self._pending.append(entry)
            if len(self._pending) >= self._wake_at:
                self._cv.notify()
        if not gate.acquire(timeout=deadline):
            with self._cv:  # gave up: withdraw, unless the flush thread let us go just now
                if entry in self._pending:
                    self._pending.remove(entry)
        return self.flushed >= offset

    def _run(self) -> None:
        released: set[int] = set()   # threads of the producers the last fsync let go
        while True:
            with self._cv:
                self._wake_at = 1
                self._cv.wait_for(lambda: self._requested > self.flushed or self._stopped)
                if len(released) > 1 and not self._stopped:
                    # wait for the released producers and for those already waiting: counting
                    # only the released would keep a group split in two (say 4 + 4 of 8
                    # producers, after a slow start) split for good
                    self.gathers += 1
                    expect = released | {e[2] for e in self._pending}
                    self._wake_at = len(expect)
                    self._cv.wait_for(
                        lambda: self._stopped or expect <= {e[2] for e in self._pending},
                        self.MAX_GATHER_S)
                if self._stopped:
                    return
            try:
                flushed = self.flush_fn(0)
                self.fsyncs += 1
            except BaseException as exc:
                self.error = exc
                log.exception("group commit flush failed")
                time.sleep(0.01)
                continue
            with self._cv:
                self.flushed = max(self.flushed, flushed)
                done = [e for e in self._pending if e[0] <= self.flushed]
                self._pending = [e for e in self._pending if e[0] > self.flushed]
            released = {e[2] for e in done}
            for _offset, gate, _thread in done:
                gate.release()
            if self.after_flush:
                try:
                    self.after_flush()
                except BaseException:
                    log.exception("after-flush hook failed")

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            waiting, self._pending = self._pending, []
            self._cv.notify_all()
        for _offset, gate, _thread in waiting:
            gate.release()
        if self._thread.is_alive():
            self._thread.join()
