"""The put path's shared part: appending a prepared batch under the put lock (queues chosen,
files reserved before the acknowledgement, group commit waited for) and the back-pressure that
keeps the dispatch pipeline close behind the log."""

from __future__ import annotations

import errno
import logging
import time
from typing import Sequence

from strata.errors import DiskFullError, InvalidInputError
from strata.store.message import Message, PutResults, PutStatus

log = logging.getLogger("strata.store.message_store")

DISPATCH_STALL_S = 2.0  # back-pressure gives up on a dispatcher that stopped moving
DISPATCH_HELP_SHARE = 16  # producers dispatch themselves past 1/16 of max_dispatch_lag_bytes


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def put_prepared(store, batch, msgs: Sequence[Message] | None) -> PutResults:
    """Append a prepared batch (``put_batch``'s and ``put_columns``' common part)."""
    out = put_prepared_many(store, [(batch, msgs)])[0]
    if isinstance(out, BaseException):
        raise out
    return out


def put_prepared_many(store, items: Sequence[tuple]) -> list:
    """Append prepared batches ``[(batch, msgs or None), ...]`` one after the other under one
    hold of the put lock, then wait for ONE group commit covering them all (``put_many``).
    One entry per item: its PutResults, or the InvalidInputError that refused it (e.g. a
    queue id the topic does not have; nothing of that item is written, the others are).
    Store-level failures (closed, disk full) raise before anything is written."""
    out: list = [None] * len(items)
    work = [(i, b, m) for i, (b, m) in enumerate(items) if len(b)]
    for i, (b, _m) in enumerate(items):
        if not len(b):
            out[i] = PutResults(PutStatus.OK, [], [], 0, [], [], [], store._msg_id_prefix)
    if not work:
        return out
    if store.config.max_dispatch_lag_bytes:
        wait_for_dispatch(store, store.config.max_dispatch_lag_bytes,
                          helps=any(b.columnar for _i, b, _m in work))
    appended: list = []
    with store._put_lock:
        store._check_open()
        if store._disk_full:
            why = ("it was opened on a full disk" if store._open_writes_pending else
                   f"disk usage is above the warning ratio "
                   f"{store.config.disk_warning_ratio:.0%}")
            raise DiskFullError(
                errno.ENOSPC, f"store {store.path}: the disk is full ({why}); puts are "
                "refused until space is freed (stored data is safe; delete_topic and "
                "clean_expired make room)")
        for w, (i, batch, msgs) in enumerate(work):
            # Nothing shared changes before the append, so a refused message leaves no trace.
            try:
                updates, rr_local, new_topics = batch.choose_queues(
                    store.topic_table.queues, store.config.default_queues, store._queue_next,
                    store._round_robin)
            except InvalidInputError as exc:
                out[i] = exc
                continue
            try:
                for topic, n_q in new_topics.items():
                    store.topic_table.ensure(topic, n_q, since=store.log.max_offset())
                # What dispatch will need exists before the put is acknowledged (a full disk
                # refuses the put here, not the consume queue after it was acknowledged).
                for (topic, qid), nxt in updates.items():
                    store.queues.reserve(topic, qid, store._queue_next.get((topic, qid), 0),
                                         nxt)
                store.key_index.ensure_spare()
                store_ts = max(now_ms(), store.log.last_store_timestamp)
                if batch.columnar:
                    offsets = store.log.append_headers(batch.headers(), batch.record_bytes(),
                                                      store_ts)
                else:
                    offsets = store.log.append_batch(batch.records(), store_ts)
            except Exception as exc:
                if not appended:
                    raise               # nothing written: the caller's put failed whole
                # the items already appended are answered below (after their group
                # commit); this one and the rest get the failure
                for j, _b, _m in work[w:]:
                    out[j] = exc
                break
            store._queue_next.update(updates)
            store._round_robin.update(rr_local)
            appended.append((i, batch, msgs, offsets, store_ts))
        end = store.log.max_offset()
        store._appended_end = end
        if store._group_commit is None:
            store.state.set_confirmed(end)
            store._reput.wakeup()
    status = PutStatus.OK
    if appended and store._group_commit is not None:
        if not store._group_commit.wait_for(end):
            status = PutStatus.FLUSH_DISK_TIMEOUT
    for i, batch, msgs, offsets, store_ts in appended:
        topics = batch.single_topic if batch.single_topic is not None else \
            [m.topic for m in msgs]
        out[i] = PutResults(status, offsets, batch.totals, store_ts, topics, batch.queue_ids,
                            batch.queue_offsets, store._msg_id_prefix)
    return out


def wait_for_dispatch(store, limit: int, *, helps: bool = True) -> None:
    """Back-pressure: while the dispatch pipeline is more than ``limit`` bytes behind the
    log, wait until it is at half of that, so queues and the key index stay close to the
    log (consumers see messages promptly, a crash replays little) whatever the producers
    do. A dispatcher that makes no progress for DISPATCH_STALL_S (it failed) stops
    holding puts back.

    Before that, a producer of a large batch (``helps``) dispatches batches itself from
    1/DISPATCH_HELP_SHARE of ``limit`` on, until the lag is back under that: with the GIL,
    a background dispatcher that keeps losing it to a busy producer (numpy releases it on
    large arrays, and getting it back takes up to the 5 ms switch interval) falls behind
    although its work is a third of the producer's. Producers of small batches leave it
    to the thread (helping them measured slower)."""
    reput = store._reput
    if reput is None or not reput.running:
        return
    behind = reput.behind_bytes()
    help_at = limit // DISPATCH_HELP_SHARE
    while helps and behind > help_at:
        store.dispatch_helped += reput.help_once()
        before, behind = behind, reput.behind_bytes()
        if behind >= before:
            break  # no progress here (failing dispatcher): the waiting below decides
    if behind <= limit:
        return
    began = time.monotonic()
    last, last_move = reput.reput_offset, began
    reput.wakeup()
    while reput.behind_bytes() > limit // 2:
        time.sleep(0.0005)
        now = time.monotonic()
        if reput.reput_offset != last:
            last, last_move = reput.reput_offset, now
        elif now - last_move > DISPATCH_STALL_S:
            log.warning("store %s: dispatch made no progress for %.0f s at offset %d; puts "
                        "go on without waiting for it", store.path, DISPATCH_STALL_S, last)
            break
    store.dispatch_wait_s += time.monotonic() - began
