"""Open-time recovery of the derived files: consume queues and key index checked against
the recovered log and the checkpoint's summary, repaired or replayed, and the recovery report."""
from __future__ import annotations

import logging

from strata.format.checkpoint import Checkpoint
from strata.index import key_index_rebuild
from strata.index.derived_check import check_queues, trusted_ends
from strata.index.dispatch import ReputService
from strata.index.key_index_rebuild import KeyIndexRebuild
from strata.index.queue_recovery import recover_queues
from strata.index.queues import KeyIndexDispatcher, TopicGate

log = logging.getLogger("strata.store.message_store")   # the same logger as before the split


def after_log_recovered(store, cp: Checkpoint | None, clean: bool) -> None:
    """Bring consume queues and key index in line with the recovered log, then replay.

    Every unit after the checkpoint is checked against the record it points at and the
    queue cut after its last right one (``recover_queues``); unusable queue or index files
    were set aside when loaded. The log is re-dispatched from the checkpoint, or from
    further back where a queue or the index lost what the checkpoint had covered."""
    end = store.log.max_offset()
    log_min = store.log.min_offset()
    start = cp.dispatched_offset if cp is not None else 0
    start = max(log_min, min(start, end))
    store.queues.load()
    # derived files are checked against what the last checkpoint recorded of them, and
    # against what a unit can hold, before the units after the checkpoint are checked
    # against the log (docs/recovery.md "Derived files")
    summary = store.derived.load() if cp is not None else None
    table = store.topic_table
    expected = trusted_ends(summary, table.queues, table.since, end)
    checked = check_queues(store.queues, expected, table.since, log_min, end,
                           store.log.max_record_size())
    index_lost: list[str] = []
    if summary is not None:
        index_lost = store.key_index.check_expected(summary.index_files, summary.index_end,
                                                   log_min, end)
    fixed = recover_queues(store.queues, store.log, start, end, thorough=not clean)
    store.key_index.truncate(start)   # entries past the checkpoint go first (torn or not)
    index_lost += store.key_index.check_chains(log_min)
    store.queues.correct_min_offsets(log_min)
    replay = start
    for q in fixed:
        if q.damaged:
            replay = min(replay, max(q.replay_from, log_min,
                                     store.topic_table.since.get(q.topic, 0)))
    for c in checked:
        replay = min(replay, max(c.replay_from, log_min))
    index_dispatch = KeyIndexDispatcher(store.key_index)
    index_from = store.key_index.damaged_from
    if index_from is not None:
        index_from = max(index_from, log_min)
        big = end - index_from > key_index_rebuild.BACKGROUND_REBUILD_BYTES
        if index_from < replay and big:
            # a large stretch: rebuilt in the background, query says so meanwhile
            store._index_rebuild = KeyIndexRebuild(store.log, store.key_index, index_dispatch,
                                                  index_from, end, store.confirmed_offset)
        else:
            replay = min(replay, index_from)
    store._reput = ReputService(store.log, store.confirmed_offset,
                               [TopicGate(store.topic_table, store.queues),
                                store._index_rebuild or index_dispatch],
                               replay, on_advance=store._on_dispatched)
    replayed = store._reput.catch_up(end)
    if store._index_rebuild is None:   # the index is whole (again): readers may query it
        key_index_rebuild.clear_marker(store.key_index.directory)
    report = store.recovery_report
    if report is not None:
        report.redispatched_records = replayed
        report.consume_queue_units_dropped = sum(q.dropped for q in fixed)
        named = {(q.topic, q.queue_id) for q in fixed if q.damaged}   # one line a queue
        repaired = [c.describe() for c in checked if (c.topic, c.queue_id) not in named]
        repaired += [q.describe() for q in fixed if q.damaged]
        how = (f"offset {replay}" if store._index_rebuild is None else
               f"offset {store._index_rebuild.start} in the background (query raises "
               "IndexRebuildingError until it is done)")
        repaired += [f"{line}; rebuilt from the commit log from {how}"
                     for line in index_lost]
        if store.key_index.set_aside:
            repaired.append(f"key index file(s) set aside: "
                            f"{'; '.join(store.key_index.set_aside)}; rebuilt from the "
                            f"commit log from {how}")
        for line in repaired:
            log.warning("store %s: %s", store.path, line)
        report.repaired_files += repaired
    store._queue_next = {k: cq.max_offset() for k, cq in store.queues.queues.items()}
    for k, want in expected.items():   # offsets once given out are never given again
        if store._queue_next.get(k, 0) < want.end:
            store._queue_next[k] = want.end
            line = (f"consume queue {k[0]}/{k[1]}: the commit log no longer holds the "
                    f"records of offsets up to {want.end - 1}; new messages continue at "
                    f"offset {want.end}")
            log.warning("store %s: %s", store.path, line)
            if report is not None:
                report.repaired_files.append(line)
