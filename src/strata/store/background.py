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
from strata.store import tier_link
from strata.store.retention import RetentionService

log = logging.getLogger("strata.store.message_store")


def start_services(store) -> None:
    cfg = store.config
    if cfg.tier_url is not None:  # made first: a bad tier metadata file starts nothing
        factory = tier_link.service_factory()
        if factory is None:
            raise InvalidInputError("StoreConfig.tier_url needs strata.tiered: "
                                    "import strata (or strata.tiered) first")
        store.tier = factory(store)
    if cfg.flush == "sync":
        store._group_commit = GroupCommitService(store.log.flush,
                                                timeout_ms=cfg.sync_flush_timeout_ms,
                                                after_flush=lambda: after_sync_flush(store))
        store._group_commit.start(store.log.max_offset())
    store._flusher = AsyncFlushService(lambda least: background_flush(store, least),
                                      interval_ms=cfg.flush_interval_ms,
                                      least_pages=cfg.flush_least_pages,
                                      thorough_ms=cfg.flush_thorough_interval_ms)
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
    now = time.monotonic()
    if now - store._last_checkpoint >= store.config.checkpoint_interval_ms / 1000.0 \
            and not store._open_writes_pending:
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
