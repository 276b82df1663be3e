"""Retention: keep the disk bounded by deleting the oldest commit-log segments.

Files older than ``retention_hours`` (by their newest *stored* time, not mtime) are deleted,
oldest first, at most ``max_files_deleted_per_run`` per pass, never the active segment and never
one the dispatch pipeline has not finished. Passes run at the configured hours, or at any hour
when disk usage is above ``disk_max_used_ratio``; above ``disk_warning_ratio`` puts are refused
(DiskFullError) until space is back. Unexpired messages are only ever deleted when the
operator says so: with ``delete_unexpired_when_full`` (RocketMQ's policy, off by default) the
oldest files go regardless of age above ``disk_clean_forcibly_ratio``, and
``run_once(force=True)`` (``MessageStore.clean_expired(force=True)``) deletes them once.
Consume-queue and key-index files follow the log's new minimum.

With a tier, a segment goes only once the tier durably holds every queue's messages in it
(``first_not_uploaded``): an unreachable tier keeps expired segments on disk. Disk usage above
``disk_clean_forcibly_ratio`` (or ``force``) deletes them anyway; each such segment is logged
as an error and counted in ``deleted_before_upload`` (``store.tier.stat()``).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from typing import TYPE_CHECKING, Callable

import numpy as np

from strata.format.consume_queue import BLANK_SIZE

if TYPE_CHECKING:
    from strata.store.message_store import MessageStore

log = logging.getLogger(__name__)


def disk_used_ratio(path) -> float:
    u = shutil.disk_usage(path)
    return u.used / u.total if u.total else 0.0


def first_not_uploaded(store: "MessageStore") -> int:
    """The smallest commit-log offset of a message in a queue that the store's tier does not
    durably hold yet (the log's end if it holds them all)."""
    low = store.log.max_offset()
    tier = store.tier
    for topic, n_queues in list(store.topic_table.queues.items()):
        for qid in range(n_queues):
            cq = store.queues.get(topic, qid)
            if cq is None:
                continue
            start, end = max(tier.uploaded(topic, qid), cq.min_offset()), cq.max_offset()
            while start < end:   # the first real unit from there (blank units hold nothing)
                units = cq.read_units(start, min(end - start, 1024))
                if len(units) == 0:
                    break
                real = np.flatnonzero(units["size"] != BLANK_SIZE)
                if len(real):
                    low = min(low, int(units["offset"][real[0]]))
                    break
                start += len(units)
    return low


class RetentionService:
    """Runs retention passes in the background; ``run_once`` is also called on demand."""

    def __init__(self, store: "MessageStore") -> None:
        self.store = store
        cfg = store.config
        self.interval = cfg.retention_check_interval_ms / 1000.0
        # Tests replace these two to simulate disk usage and the clock.
        self.disk_usage: Callable[[], float] = lambda: disk_used_ratio(store.path)
        self.clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="strata-retention", daemon=True)
        self.deleted_total = 0
        self.deleted_before_upload = 0   # segments deleted before the tier held them
        self.kept_for_tier = False       # the last pass kept expired segments for the tier
        self.last_usage = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception:
                log.exception("retention pass failed")

    def run_once(self, now_ms: int | None = None, *, manual: bool = False,
                 force: bool = False) -> int:
        """One pass; returns the number of commit-log files deleted. ``force`` deletes the
        oldest files (at most ``max_files_deleted_per_run``) whether expired or not."""
        with self._lock:
            return self._pass(self.clock_ms() if now_ms is None else now_ms, manual, force)

    def _pass(self, now_ms: int, manual: bool, forced: bool = False) -> int:
        store = self.store
        cfg = store.config
        usage = self.disk_usage()
        self.last_usage = usage
        full = usage > cfg.disk_warning_ratio
        life = store.life
        if full:
            if life.enter_disk_full():
                log.warning(
                    "disk usage %.0f%% is above %.0f%%: refusing puts until space is freed "
                    "(expired files are deleted now; %s)", usage * 100,
                    cfg.disk_warning_ratio * 100,
                    "unexpired ones too, delete_unexpired_when_full is set"
                    if cfg.delete_unexpired_when_full else "unexpired messages are kept: "
                    "delete_topic, clean_expired(force=True) or more space make room")
        elif life.disk_full and life.leave_disk_full():
            log.info("disk usage %.0f%%: accepting puts again", usage * 100)
        force = forced or (cfg.delete_unexpired_when_full
                           and (full or usage > cfg.disk_clean_forcibly_ratio))
        hour = time.localtime(now_ms / 1000).tm_hour
        time_up = manual or full or hour in cfg.delete_hours or usage > cfg.disk_max_used_ratio
        if not (time_up or force):
            return 0
        expire_ms = int(cfg.retention_hours * 3600 * 1000)
        deleted = 0
        clog = store.log
        dispatched = life.dispatched_offset()
        # with a tier: only what it durably holds goes, unless the disk is that full
        pending = first_not_uploaded(store) if store.tier is not None else None
        pressed = force or usage > cfg.disk_clean_forcibly_ratio
        was_kept, self.kept_for_tier = self.kept_for_tier, False
        while deleted < cfg.max_files_deleted_per_run:
            segs = clog.segment_list()
            if len(segs) < 2:
                break
            seg = segs[0]
            if dispatched is not None and seg.end_offset > life.dispatched_offset():
                break  # not dispatched yet
            expired = seg.max_store_timestamp + expire_ms <= now_ms
            if not (expired or force):
                break
            uploaded = pending is None or seg.end_offset <= pending
            if not (uploaded or pressed):
                self.kept_for_tier = True
                if not was_kept:   # said once, not at every pass while the tier is away
                    log.warning("retention keeps expired commit-log segment %s: the tier does "
                                "not hold all of it yet (from commit-log offset %d)",
                                seg.path.name, pending)
                break
            clog.delete_oldest()
            deleted += 1
            if uploaded:
                log.info("retention deleted commit-log segment %s (%s)", seg.path.name,
                         "expired" if expired else f"disk {usage:.0%}")
            else:
                self.deleted_before_upload += 1
                log.error("retention deleted commit-log segment %s BEFORE THE TIER HELD IT "
                          "(disk %.0f%%%s): its messages from commit-log offset %d on that "
                          "were not uploaded are lost (the tier counts them as skipped)",
                          seg.path.name, usage * 100, ", forced" if force else "", pending)
        if deleted:
            min_phys = clog.min_offset()
            with life.put_lock:
                store.queues.delete_files_below(min_phys)
            store.key_index.delete_files_below(min_phys)
            store.state.set_min(min_phys)
            self.deleted_total += deleted
            if life.disk_full:
                usage = self.disk_usage()
                if usage <= cfg.disk_warning_ratio and life.leave_disk_full():
                    log.info("disk usage %.0f%%: accepting puts again", usage * 100)
        return deleted
