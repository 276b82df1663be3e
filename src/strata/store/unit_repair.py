"""Repairs reads asked for: a read that meets a consume-queue unit leading to another record
reports it and passes over it (reads never write); it hands the unit here, and the writer
re-derives it from the commit log off the read path (its background flush service, and close
before the clean-shutdown checkpoint)."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from strata.index.queue_recovery import rederive_unit

log = logging.getLogger("strata.store.message_store")

MAX_PENDING = 4096   # units waiting at most (more are found again by a later read)


class UnitRepairs:
    """Units reads found damaged, waiting for the writer to re-derive them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pending: set[tuple[str, int, int]] = set()
        self._running = 0
        self.wake: Callable[[], None] | None = None   # the writer's service that runs them

    def request(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """A read found the unit of ``queue_offset`` leading to another record."""
        with self._lock:
            if len(self._pending) < MAX_PENDING:
                self._pending.add((topic, queue_id, queue_offset))
        if self.wake is not None:
            self.wake()

    def pending(self) -> int:
        return len(self._pending) + self._running

    def wait(self, timeout: float) -> bool:
        """Block until no unit waits for repair (run by another thread); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._running,
                                          timeout)

    def run(self, store) -> int:
        """Re-derive every waiting unit from the log (the writer, off the read path);
        returns how many were rewritten. One whose record the log no longer holds stays as
        it is, and reads go on reporting it."""
        with self._lock:
            todo, self._pending = sorted(self._pending), set()
            self._running += 1
        try:
            return self._run(store, todo)
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def _run(self, store, todo: list[tuple[str, int, int]]) -> int:
        fixed = 0
        for topic, queue_id, q in todo:
            cq = store.queues.get(topic, queue_id)
            if cq is None or not cq.min_offset() <= q < cq.max_offset():
                continue
            try:
                at = cq.unit(q)[0]
                if rederive_unit(cq, store.log, q, store.confirmed_offset()):
                    fixed += 1
                    log.warning("store %s: %s/%d offset %d: its consume-queue unit led to "
                                "commit-log offset %d, not to its record; rewritten from the "
                                "log", store.path, topic, queue_id, q, at)
                else:
                    log.error("store %s: %s/%d offset %d: its consume-queue unit leads to "
                              "another record and the log holds none of its own (repair with "
                              "`strata spark rebuild-index`)", store.path, topic, queue_id, q)
            except (OSError, ValueError) as exc:   # a file gone or the disk full: next time
                log.warning("store %s: %s/%d offset %d: unit repair failed (%s)", store.path,
                            topic, queue_id, q, exc)
        return fixed
