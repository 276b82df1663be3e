"""The put path's shared part: appending a prepared batch under the put lock (queues chosen,
files reserved before the acknowledgement, group commit waited for) and the back-pressure that
keeps the dispatch pipeline close behind the log."""

from __future__ import annotations

import errno
import logging
import time
from typing import Sequence

from strata.errors import DiskFullError, InvalidInputError
from strata.store.message import ColumnBatch, Message, PutResult, PutResults, PutStatus

log = logging.getLogger("strata.store.message_store")

DISPATCH_STALL_S = 2.0  # back-pressure gives up on a dispatcher that stopped moving
DISPATCH_HELP_SHARE = 16  # producers dispatch themselves past 1/16 of max_dispatch_lag_bytes


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def put(store, msg: Message) -> PutResult:
    """Append one message (the batch of one)."""
    return put_batch(store, (msg,))[0]


def check_batch(store, msgs: Sequence[Message]) -> None:
    """Raise what ``put_batch(msgs)`` would raise for its input (InvalidInputError and
    subclasses), writing nothing: a caller appending one large job in several batches
    checks all of them first."""
    batch = store._encoder.prepare(list(msgs))
    if len(batch):
        batch.choose_queues(store.topic_table.queues, store.config.default_queues, {}, {})


def put_batch(store, msgs: Sequence[Message]) -> PutResults:
    """Append messages in order; all get the same store timestamp, which is also the born
    timestamp of a message that gives none (the put call is its producer). Returns one
    ``PutResult`` per message (a ``PutResults`` sequence, made when first read).

    Invalid input raises (InvalidInputError and subclasses) before anything is written.
    """
    store._check_writable()
    if isinstance(msgs, Message):
        msgs = (msgs,)
    elif not isinstance(msgs, (list, tuple)):
        try:
            msgs = list(msgs)  # any iterable of messages (a generator, a deque, ...)
        except TypeError:
            raise InvalidInputError(f"put_batch takes an iterable of strata.Message, got "
                                    f"{type(msgs).__name__}") from None
    batch = store._encoder.prepare(msgs)
    return put_prepared(store, batch, msgs)


def put_columns(store, topic: str, queue_id: int | None, bodies, *, keys=None, tags=None,
                properties=None, born_timestamps=None) -> PutResults:
    """Append a batch given as columns, one item per message, all to ``topic`` and queue
    ``queue_id`` (None: round-robin over the topic's queues, as ``put_batch``). The records
    are the ones ``put_batch`` writes for ``Message(topic, body, keys=..., tags=...,
    properties=..., born_timestamp=...)`` of the same values, encoded in one compiled pass;
    results, durability (group commit under sync flush) and errors are ``put_batch``'s.

    Columns (each of ``len(bodies)`` items; a ``strata.format.columns.BytesColumn`` — one
    buffer and n + 1 offsets, e.g. an Arrow binary array's — or a Python sequence):

    - ``bodies``: each message's body (bytes-like items).
    - ``keys``: None (no keys), or a BytesColumn of one UTF-8 key per message (an empty item:
      no key), or a sequence holding per message None, one key (str, or UTF-8 bytes) or a
      list/tuple of keys. Each key is indexed for ``query`` (at most 65535 bytes).
    - ``tags``: None, or one tag per message (BytesColumn of UTF-8 or str / None items;
      empty: no tag).
    - ``properties``: None, or per message the user properties: a BytesColumn of
      pre-encoded property sections (entries back to back, each a little-endian u16 name
      length, the UTF-8 name, a u16 value length, the UTF-8 value: docs/format.md's
      properties encoding; empty: none; names KEYS and TAGS refused), or a sequence of
      mappings of str to str (or None).
    - ``born_timestamps``: None (every message born at the put: the batch's store
      timestamp), or ms since the epoch per message (a numpy integer array, or a sequence of
      int / None, None: born at the put).

    Invalid input raises (InvalidInputError and subclasses, naming the message) before
    anything is written."""
    store._check_writable()
    batch = store._encoder.prepare_columns(topic, bodies, keys=keys, tags=tags,
                                          properties=properties,
                                          born_timestamps=born_timestamps,
                                          queue_id=queue_id)
    return put_prepared(store, batch, None)


def put_many(store, items: Sequence) -> list:
    """Store several batches at once, each a list of ``Message`` (as ``put_batch``) or a
    ``ColumnBatch`` (``put_columns``' arguments): appended in order under one hold of the
    put lock, and under sync flush answered after ONE fsync that covers them all (the
    send batcher's group commit across requests and connections).

    One entry per item, in order: its ``PutResults``, or the ``InvalidInputError`` that
    refused it (nothing of that item is written; the other items are). Store-level
    failures (closed, read-only, disk full) raise before anything is written."""
    store._check_writable()
    prepared: list = []
    refused: dict[int, InvalidInputError] = {}
    for i, item in enumerate(items):
        try:
            if isinstance(item, ColumnBatch):
                batch = store._encoder.prepare_columns(
                    item.topic, item.bodies, keys=item.keys, tags=item.tags,
                    properties=item.properties, born_timestamps=item.born_timestamps,
                    queue_id=item.queue_id)
                prepared.append((batch, None))
            else:
                msgs = list(item) if not isinstance(item, (list, tuple)) else item
                prepared.append((store._encoder.prepare(msgs), msgs))
        except InvalidInputError as exc:
            refused[i] = exc
    done = iter(put_prepared_many(store, prepared) if prepared else ())
    return [refused[i] if i in refused else next(done) for i in range(len(items))]


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
    with store.life.put_lock:
        store._check_open()
        if store.life.disk_full:
            why = ("it was opened on a full disk" if store.life.open_writes_pending else
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
                    offsets = store.log.append_headers(batch.headers(store_ts),
                                                      batch.record_bytes(),
                                                      store_ts)
                else:
                    offsets = store.log.append_batch(batch.records(store_ts), store_ts)
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
        # one wake per batch, in both modes: under sync flush a group commit that another
        # producer's wait started may have covered this batch before its end was published
        # here, and woken the dispatcher too early to see it (no periodic wake catches it)
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
    while reput.behind_bytes() > limit // 2:
        # woken by the dispatcher's advance (a failing one is waited out, not raised)
        if reput.wait_for(reput.confirmed() - limit // 2, DISPATCH_STALL_S, fail_fast=False):
            continue
        now = time.monotonic()
        if reput.reput_offset != last:
            last, last_move = reput.reput_offset, now
        elif now - last_move > DISPATCH_STALL_S:
            log.warning("store %s: dispatch made no progress for %.0f s at offset %d; puts "
                        "go on without waiting for it", store.path, DISPATCH_STALL_S, last)
            break
    store.dispatch_wait_s += time.monotonic() - began
