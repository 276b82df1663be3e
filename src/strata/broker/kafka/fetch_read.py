"""The store side of a Kafka Fetch: a partition's messages from the fetch offset, read in
batches of ``store.get`` within a byte budget (at least one message, KIP-74), turned into
what the answer writes (``pieces``: columns over the store's own buffers, one record batch
per run of consecutive offsets). These calls can reach S3 through the tier, so they run on
the listener's read lanes (``KafkaBroker.reader``, ``read_lanes``), never on the event loop.
"""

from __future__ import annotations

import numpy as np

from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import errors as ke
from strata.broker.kafka import fetch_kernels as fk
from strata.broker.kafka import record_batch as rb
from strata.broker.kafka.fetch_answer import PartitionAnswer
from strata.broker.kafka.mapping import from_message
from strata.broker.kafka.record_batch import RecordColumns
from strata.errors import StrataError
from strata.format import record_table as rk
from strata.format.record_batch import MessageBatch
from strata.store.message import GetStatus

FIRST_CHUNK = 1024                 # messages of a partition's first store.get (sizes unknown)
READ_CHUNK = 4096                  # at most this many per later store.get, as sizes allow
RECORD_OVERHEAD = 70               # bytes of a v2 record beside its value (an estimate)


def _plain_columns(part) -> RecordColumns | None:
    """Columns straight from the store's field table, without a message object each, when
    every message of ``part`` is plain (no keys, tags or properties: the value and a
    timestamp only); else None."""
    t = part.table() if isinstance(part, MessageBatch) else None
    if t is None:
        return None
    buf, f = t
    records = np.empty((bk.R_FIELDS, f.shape[1]), np.int64)
    if not fk.plain_records(f, records):
        return None
    return RecordColumns(np.frombuffer(buf, np.uint8), _NO_BATCHES, records, _NO_HEADERS)


_NO_BATCHES = np.zeros((bk.B_FIELDS, 0), np.int64)
_NO_HEADERS = np.zeros((bk.H_FIELDS, 0), np.int64)


def _columns(msgs) -> RecordColumns:
    ts, keys, values, headers = [], [], [], []
    for m in msgs:
        k, v, t, h = from_message(m)
        ts.append(t)
        keys.append(k)
        values.append(v)
        headers.append([(hk.encode("utf-8"), hv) for hk, hv in h])
    return RecordColumns.from_lists(ts, keys, values, headers)


def _read(store, topic: str, part: int, offset: int, limit: int) -> tuple[list, int]:
    """The store's batches of messages from ``offset`` while they stay within ``limit``
    bytes (at least one message), and the bytes they take. Batches are kept as the store
    returns them (a MessageBatch makes no message object until one is asked for)."""
    parts: list = []
    size = count = 0
    fit = np.zeros(2, np.int64)
    while size < limit:
        want = FIRST_CHUNK if not count else max(1, min(READ_CHUNK, (limit - size) // max(
            1, size // count) + 1))
        got = store.get(topic, part, offset, want)
        if got.status is not GetStatus.FOUND or not got.messages:
            if got.status is GetStatus.OFFSET_FOUND_NULL and got.next_offset > offset:
                offset = got.next_offset
                continue
            break
        batch = got.messages
        t = batch.table() if isinstance(batch, MessageBatch) else None
        if t is not None:          # the messages that fit, in one compiled pass
            fk.fitting(t[1], size, limit, RECORD_OVERHEAD, fit)
            take, taken = int(fit[0]), int(fit[1])
            n = t[1].shape[1]
        else:
            sizes = np.fromiter((len(m.body) + RECORD_OVERHEAD for m in batch), np.int64)
            ends = np.cumsum(sizes) + size
            take = int(np.searchsorted(ends, limit, side="right"))
            taken = int(ends[take - 1]) if take else size
            n = len(sizes)
        if not take and not count:    # the partition's first message always fits (KIP-74)
            take = 1
            taken = size + (int(t[1][rk.F_BODY_END, 0] - t[1][rk.F_BODY_AT, 0])
                            if t is not None else len(batch[0].body)) + RECORD_OVERHEAD
        if not take:                  # not one more fits
            return parts, size
        size = taken
        if take < n:
            batch = MessageBatch(t[0], t[1][:, :take], topic) if t is not None \
                else list(batch)[:take]
            parts.append(batch)
            return parts, size
        parts.append(batch)
        count += take
        offset = got.next_offset
    return parts, size


def _pieces(parts: list) -> tuple[list[tuple], int]:
    """What a partition's answer writes: per store batch, (columns, plan, base offsets) —
    plain batches as columns over the store's own buffer (no concatenation: the bytes are
    copied once, by the batch writer, into the response), others as columns of their
    messages; one record batch per run of consecutive offsets. Also the offset after the
    last message written (-1 if none)."""
    pieces = []
    end = -1
    for p in parts:
        t = p.table() if isinstance(p, MessageBatch) else None
        cols = _plain_columns(p) if t is not None else None
        if t is not None:
            offsets = t[1][rk.F_QUEUE_OFFSET]
        else:
            offsets = np.fromiter((m.queue_offset for m in p), np.int64)
        if cols is None:
            cols = _columns(list(p))
        if len(offsets) and offsets[-1] - offsets[0] == len(offsets) - 1:
            firsts = _ZERO
            counts = np.array([len(offsets)], np.int64)
        else:
            breaks = np.flatnonzero(np.diff(offsets) != 1) + 1
            firsts = np.concatenate(([0], breaks)).astype(np.int64)
            counts = np.diff(np.concatenate((firsts, [len(offsets)]))).astype(np.int64)
        plan = rb._plan(cols, firsts, counts)
        pieces.append((cols, plan, offsets[firsts]))
        if len(offsets):
            end = int(offsets[-1]) + 1
    return pieces, end


_ZERO = np.zeros(1, np.int64)


def partition_answer(store, topic: str, code: int, n: int, fp,
                     budget: int) -> PartitionAnswer:
    """One partition of a Fetch: ``code`` and ``n`` are the topic's lookup (error code,
    partition count), ``fp`` the request's partition, ``budget`` the bytes the request has
    left. Reads the store: call it on a read lane's thread."""
    p = fp.partition
    if code == ke.NONE and not 0 <= p < n:
        code = ke.UNKNOWN_TOPIC_OR_PARTITION
    if code != ke.NONE:
        return PartitionAnswer(p, code)
    hw = store.max_offset(topic, p)
    start = store.min_offset(topic, p)
    offset = fp.fetch_offset
    pieces: list = []
    end = offset
    if not start <= offset <= hw:
        code = ke.OFFSET_OUT_OF_RANGE
    elif offset < hw and budget > 0:
        try:
            parts, _size = _read(store, topic, p, offset,
                                 min(fp.partition_max_bytes, budget))
            pieces, last = _pieces(parts)
            end = max(end, last)
        except StrataError as exc:
            pieces, code = [], ke.code_for(exc)
    answer = PartitionAnswer(p, code, hw, start, pieces)
    answer.next_offset = end
    return answer


def warm() -> None:
    """Load the Fetch's compiled parts: the record-batch codec and the store-side loops
    (numba's cached machine code, 0.1-0.3 s per kernel on first use), so that the
    listener's first Produce and Fetch do not pay for it."""
    rb.warm()
    fk.warm()
