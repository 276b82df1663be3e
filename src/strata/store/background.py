"""The writer's background services: the group-commit and interval flush services, the
dispatch thread and index rebuild, retention and the tier, started at open; and the periodic
checkpoint the flush service writes (queues and index flushed, then how far they are durable)."""

from __future__ import annotations

import logging
import time

from strata.errors import DiskFullError, InvalidInputError
from strata.files.flush import AsyncFlushService, GroupCommitService
from strata.format.checkpoint import Checkpoint
from strata.index.derived_check import snapshot
from strata.store.retention import RetentionService

log = logging.getLogger("strata.store.message_store")

FLUSH_WAIT_S = 60.0     # flush(): at most this long for the group commit to count the fsync


def start_services(store) -> None:
    cfg = store.config
    if cfg.tier_url is not None:  # made first: a bad tier metadata file starts nothing
        support = store.history.tier_support
        if support is None:
            raise InvalidInputError(
                f"store {store.path} has a tier ({cfg.tier_url}) but was opened without "
                "tiered storage: open it with strata.open (or pass "
                "tier=strata.tiered.SUPPORT to MessageStore)")
        store.tier = support.link(store)
    if cfg.flush == "sync":
        store._group_commit = GroupCommitService(store.log.flush,
                                                timeout_ms=cfg.sync_flush_timeout_ms,
                                                after_flush=lambda: after_sync_flush(store))
        store._group_commit.start(store.log.max_offset())
    store._flusher = AsyncFlushService(lambda least: background_flush(store, least),
                                      interval_ms=cfg.flush_interval_ms,
                                      least_pages=cfg.flush_least_pages,
                                      thorough_ms=cfg.flush_thorough_interval_ms)
    store.repairs.wake = store._flusher.wakeup   # units reads found damaged: soon
    store._flusher.start()
    store._reput.start()
    if store._index_rebuild is not None:
        store._index_rebuild.start_thread()
    store.retention = RetentionService(store)
    store.retention.start()
    if store.tier is not None:
        store.tier.start()


def background_flush(store, least_pages: int) -> int:
    flushed = store.log.flush(least_pages)
    if store.repairs.pending():   # units reads found damaged: re-derived here, not by reads
        store.repairs.run(store)
    now = time.monotonic()
    if now - store._last_checkpoint >= store.config.checkpoint_interval_ms / 1000.0 \
            and not store.life.open_writes_pending:
        store._last_checkpoint = now
        try:
            write_checkpoint(store, clean_end=-1)
        except DiskFullError as exc:  # the last checkpoint stays: recovery replays more
            if not store._checkpoint_refused:
                log.warning("store %s: no room for the checkpoint (%s); the previous one "
                            "stays until space is freed", store.path, exc)
            store._checkpoint_refused = True
        else:
            store._checkpoint_refused = False
    return flushed


def write_checkpoint(store, clean_end: int) -> None:
    """Flush queues and index, then record how far they are durable. The next background
    checkpoint comes ``checkpoint_interval_ms`` after this one (the one an open writes
    included: before, the first background flush wrote one at once on a machine up for longer
    than the interval, which made a test's "no checkpoint after this one" untrue under load)."""
    store._last_checkpoint = time.monotonic()
    dispatched = store._reput.reput_offset if store._reput is not None else 0
    rebuild = store._index_rebuild
    if rebuild is not None and rebuild.active:   # the index covers less: replay from there
        dispatched = min(dispatched, rebuild.position)
    derived = snapshot(store.queues, store.key_index, store.topic_table.since)
    store.queues.flush()
    store.key_index.flush()
    store.derived.store(derived)   # names only what the flushes above made durable
    last = store.log.segments.last()
    store.checkpoint.store(Checkpoint(
        flushed_offset=store.log.flushed_offset(), clean_end_offset=clean_end,
        physic_timestamp=store.log.last_store_timestamp,
        dispatched_offset=dispatched, min_offset=store.log.min_offset(),
        active_record_count=last.record_count if last else 0,
        active_min_timestamp=last.min_store_timestamp if last else 0,
        active_max_timestamp=last.max_store_timestamp if last else 0))


def after_sync_flush(store) -> None:
    store.state.set_confirmed(store._group_commit.flushed)
    if store._reput is not None:
        store._reput.wakeup()


def wait_dispatched(store, timeout: float = 30.0) -> bool:
    """Block until queues and index cover everything confirmed so far."""
    store._check_open()
    if store.readonly or store._reput is None:
        return True
    reput = store._reput
    if reput.wait_for(store.confirmed_offset(), timeout):   # woken by dispatch's advance
        return True
    if reput.error is not None:
        raise reput.error
    return False


def wait_repaired(store, timeout: float = 30.0) -> bool:
    """Block until the writer has re-derived the consume-queue units reads found leading to
    another record (reads never write: they report such a unit in ``corrupt``, pass over it
    and leave its repair to the writer's background service); a reader may then read them
    again. True when none wait (always, on a read-only opener)."""
    store._check_open()
    if store.readonly or store._flusher is None:
        return True
    store._flusher.wakeup()
    return store.repairs.wait(timeout)


def wait_index_rebuilt(store, timeout: float | None = None) -> bool:
    """Block until a background rebuild of the key index (an open that found a large
    part of it lost) is done; True when there is none or it finished in time."""
    store._check_open()
    r = store._index_rebuild
    if r is None:
        return True
    return r.done.wait(timeout) and not r.active


def dispatch_behind_bytes(store) -> int:
    if store.readonly:
        _pid, confirmed, dispatched, _m = store.state.read() if store.follows_writer \
            else (0, 0, 0, 0)
        return max(0, confirmed - dispatched)
    return store._reput.behind_bytes() if store._reput is not None else 0


def flush(store) -> int:
    """Make everything appended so far durable; returns the flushed offset."""
    store._check_open()
    if store.readonly:
        return store.confirmed_offset()
    flushed = store.log.flush(0)
    if store._group_commit is not None:
        # until the group commit counts it too (readers see up to its offset): not the
        # puts' sync_flush_timeout_ms, which a flush in progress can outlast under load
        store._group_commit.wait_for(store.log.max_offset(), timeout=FLUSH_WAIT_S)
    return flushed


def tier_sync(store, timeout_s: float = 60.0) -> None:
    """Upload everything confirmed now to the tier; return when the tier holds it
    (TierUnavailableError, naming the last failure, after ``timeout_s``)."""
    store._check_writable()
    if store.tier is None:
        raise InvalidInputError(f"store {store.path} has no tier (StoreConfig.tier_url)")
    store.tier.sync(timeout_s)


def clean_expired(store, now_ms: int | None = None, *, force: bool = False) -> int:
    """Run one retention pass now (as if at a deletion hour); returns files deleted.

    ``force=True`` deletes the oldest commit-log files (at most
    ``max_files_deleted_per_run``, never the active one) whether expired or not: an
    operator's way out of a full disk, at the price of those messages."""
    store._check_writable()
    return store.retention.run_once(now_ms, manual=True, force=force)


def dispatched_offset(store) -> int:
    """The commit-log offset up to which records have reached their consume queues (and so
    ``get`` finds them): ``confirmed_offset()`` less what dispatch still has to do."""
    if store.readonly:
        _pid, confirmed, dispatched, _m = store.state.read() if store._live_writer \
            else (0, store._readonly_limit, store._readonly_limit, 0)
        return min(confirmed, dispatched)
    return store._reput.reput_offset if store._reput is not None else store.confirmed_offset()
