"""The store's life cycle: opening (a writer recovers the log and its derived files and starts
its services; a read-only opener follows a live writer), the disk-full state, and closing.

``Lifecycle`` is the small interface the services beside the store (retention, the tier) use
instead of the store's private fields: the put lock, whether puts are refused for a full disk
(and the way out of it), and how far the dispatch pipeline has come.
"""

from __future__ import annotations

import logging
import threading
import time

from strata.errors import DiskFullError
from strata.files.io import disk_full_or_same
from strata.files.lock import writer_alive
from strata.log.recovery import recover
from strata.store import arrow_read, background, open_recovery
from strata.store.geometry import save_geometry
from strata.store.tier_config import save_tier

log = logging.getLogger("strata.store.message_store")   # the same logger as before the split

# How often a read-only opener that found no writer looks again for one (a lock probe).
WRITER_PROBE_S = 0.1


class Lifecycle:
    """A store's life-cycle state, as retention and the tier see it."""

    def __init__(self, store) -> None:
        self._store = store
        self.put_lock = threading.Lock()   # puts, topic changes and retention's file deletes
        self.closed = True
        self.disk_full = False             # puts are refused (retention sets and clears it)
        self.open_writes_pending = False   # opened on a full disk: checkpoint, marker unwritten

    def enter_disk_full(self) -> bool:
        """Refuse puts from now on (disk usage above the warning ratio); True if they were
        accepted until now."""
        was, self.disk_full = self.disk_full, True
        return not was

    def leave_disk_full(self) -> bool:
        """Retention found room again: finish the writes a full disk held back at open, then
        accept puts; False (puts still refused) if there is still no room for them."""
        store = self._store
        with self.put_lock:
            if self.open_writes_pending:
                try:
                    open_writes(store)
                except DiskFullError as exc:
                    log.warning("store %s: still no room for its open files (%s); puts stay "
                                "refused", store.path, exc)
                    return False
                self.open_writes_pending = False
            self.disk_full = False
        return True

    def dispatched_offset(self) -> int | None:
        """The commit-log offset up to which queues and index are written (None: no
        dispatcher, a read-only opener)."""
        reput = self._store._reput
        return None if reput is None else reput.reput_offset


# ---------------------------------------------------------------------- opening

def open_writer(store) -> None:
    store._lock.acquire()
    try:
        clean = not store.abort_marker.exists()
        cp = store.checkpoint.load()
        store.topic_table.load()
        store.log.load()
        store.recovery_report = recover(store.log, cp, clean)
        store._appended_end = store.log.max_offset()
        open_recovery.after_log_recovered(store, cp, clean)
        end = store.log.max_offset()
        store.state.open(confirmed=end, dispatched=end, min_offset=store.log.min_offset())
        try:
            open_writes(store)
        except DiskFullError as exc:
            # A way out from within: the store opens refusing puts, so that reads,
            # delete_topic and clean_expired work; leave_disk_full writes these later.
            store.life.open_writes_pending = True
            store.life.disk_full = True
            log.warning("store %s opened on a full disk (%s): puts are refused until "
                        "space is freed; reads, delete_topic and clean_expired work",
                        store.path, exc)
        if store.topic_table.recovered:
            store.recovery_report.repaired_files.append(store.topic_table.recovered)
        if store.log.segments.last() is None and store.config.preallocate:
            store.log.segments.allocator.request(0)  # the first segment, in the background
        background.start_services(store)
    except BaseException:
        store.log.close()
        store._lock.release()
        raise


def open_writes(store) -> None:
    """What a writer's open writes once the log is recovered (DiskFullError on a full
    disk). From here on a crash is unclean: the marker says so, the checkpoint loses its
    end."""
    background.write_checkpoint(store, -1)
    store.abort_marker.create()
    repaired = save_geometry(store.path, store.config, store.file_ops,
                             explicit=store._explicit_config)
    save_tier(store.path, store.config, store.file_ops)
    if repaired and store.recovery_report is not None:
        store.recovery_report.repaired_files.append(repaired)


def open_readonly(store) -> None:
    store.topic_table.load()
    store.log.load()
    store.queues.load()
    store._live_writer = writer_alive(store.path) and store.state.open()
    if not store._live_writer:
        cp = store.checkpoint.load()
        clean = not store.abort_marker.exists()
        store.recovery_report = recover(store.log, cp, clean, modify=False)
        store._readonly_limit = store.log.max_offset()
    refresh_readonly(store)


def refresh_readonly(store) -> None:
    """Read-only openers: follow the writer's confirmed offset and new segments."""
    if not store._live_writer and not writer_started(store):
        return
    _pid, confirmed, _disp, min_offset = store.state.read()
    last = store.log.segments.last()
    if last is None or confirmed > last.end_offset or \
            confirmed > last.base_offset + last.committed \
            or min_offset > store.log.min_offset():   # retention deleted segments
        store.log.segments.refresh()
    for seg in store.log.segment_list():
        seg.committed = max(0, min(seg.data_size, confirmed - seg.base_offset))
    store._readonly_limit = confirmed
    store.topic_table.reload()


def writer_started(store) -> bool:
    """Read-only openers that found no writer: whether one has started since (looked for
    at most every WRITER_PROBE_S seconds); from then on it is followed like one found at
    open. Without this, such a reader stayed at the log end it had found."""
    now = time.monotonic()
    if now < store._next_writer_probe:
        return False
    store._next_writer_probe = now + WRITER_PROBE_S
    store._live_writer = writer_alive(store.path) and store.state.open()
    return store._live_writer


# ---------------------------------------------------------------------- closing

def stop_services(store) -> None:
    """Stop the writer's services, the tier and retention before the dispatcher and the
    flush services they rely on (stopping a service never flushes)."""
    if store._index_rebuild is not None:
        store._index_rebuild.stop()
    for name in ("tier", "retention", "_reput", "_flusher", "_group_commit"):
        service = getattr(store, name)
        if service is not None:
            service.stop()
            if name != "_reput":   # the dispatcher stays: close catches it up by hand
                setattr(store, name, None)


def close(store) -> None:
    """Flush, seal, write the clean-shutdown checkpoint and release the directory."""
    life = store.life
    if life.closed:
        return
    if store.readonly:
        life.closed = True
        release_files(store)
        return
    with life.put_lock:
        life.closed = True
    try:
        stop_services(store)
        store.log.flush(0)
        try:
            if store._reput is not None:
                store._reput.catch_up(store.log.max_offset())
            store.repairs.run(store)   # units reads found damaged, before the checkpoint
            end = store.log.max_offset()
            background.write_checkpoint(store, end)
            store.abort_marker.remove()
        except OSError as exc:
            if not isinstance(disk_full_or_same(exc, ""), DiskFullError):
                raise
            # The log is flushed; without the clean-shutdown checkpoint the next open
            # recovers from it as after a crash, and loses nothing.
            log.warning("store %s: closed without a clean-shutdown checkpoint, the disk is "
                        "full (%s); the next open recovers from the log", store.path, exc)
    finally:
        release_files(store)


def release_files(store) -> None:
    """Unmap and close every file; the writer also gives up the directory lock. First let
    go of the ``get_columns`` batches Arrow has released (their maps then close now)."""
    arrow_read.release_held()
    store.history.close()
    store.queues.close()
    store.key_index.close()
    store.log.close()
    store.state.close()
    if store._lock.held:
        store._lock.release()


def abandon(store, checkpointed: bool) -> None:
    """Tests: stop as a crash would (no flush, no checkpoint, abort marker left behind).
    With ``checkpointed``, the crash comes right after a checkpoint that covers every
    record appended, flushed and dispatched (what a background checkpoint would write)."""
    life = store.life
    if life.closed:
        return
    with life.put_lock:
        life.closed = True
    stop_services(store)  # stopping a service never flushes
    if checkpointed:
        store._reput.catch_up(store.log.max_offset())
        store.log.flush(0)
        background.write_checkpoint(store, -1)
    release_files(store)
