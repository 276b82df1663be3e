"""Produce (key 0): each partition's record set is decoded (``record_batch``, compiled) into
columns of strata message fields (``mapping``), then stored:

* async flush: one ``store.put_many`` of column batches, one per partition (the column
  encoder; no Message object per record), on the send batcher's writer thread
  (``SendBatcher.put_soon``: never on the event loop; requests arriving meanwhile share
  the next put);
* ``--flush sync``: the same column batches as one submission to the shared send batcher,
  so the requests arriving together (any connection, either protocol) share one
  ``put_many`` and one fsync, which every acks=1/all answer waits for.

A produce is answered once its messages are dispatched (a following fetch sees them);
acks=0 sends nothing back. Idempotent batches are checked against the producer's last
sequences first (``idempotence``).
"""

from __future__ import annotations

import logging

import numpy as np

from strata.broker.kafka import api
from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import errors as ke
from strata.broker.kafka.idempotence import PROP, sequences
from strata.broker.kafka.mapping import to_fields
from strata.broker.kafka.record_batch import RecordBatchError, decode_record_set
from strata.broker.kafka.topics import partitions
from strata.errors import StrataError
from strata.format.columns import BytesColumn
from strata.store.message import ColumnBatch, Message, PutStatus

log = logging.getLogger(__name__)

COLUMNS_FROM = 64      # records of a partition from which it is stored as columns

ProduceResponse = api.response_class(0)
TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse


class _Part:
    """One partition of the request: its records as put_columns columns, or its error."""

    __slots__ = ("topic", "index", "code", "message", "count", "offset", "seqs", "bodies",
                 "keys", "props", "born", "start")

    def __init__(self, topic: str, index: int) -> None:
        self.topic = topic
        self.index = index
        self.code = ke.NONE
        self.message: str | None = None
        self.count = 0
        self.start = 0
        self.offset = -1
        self.seqs: list = []         # (pid, entry, the batch's first record in the set)
        self.bodies: list = []
        self.keys: list | None = None
        self.props: list | None = None
        self.born = None

    def item(self) -> ColumnBatch | list[Message]:
        """The records as the store takes them best: from COLUMNS_FROM records one
        ``put_columns`` batch to this partition's queue (no object per record); fewer as
        ``Message`` objects, which the send batcher joins with the request's other small
        partitions into one batch (a column batch has a fixed cost of ~75 µs, a message
        list ~2-3 µs a message: bench/README.md)."""
        if self.count >= COLUMNS_FROM:
            return ColumnBatch(self.topic, self.index, self.bodies, keys=self.keys,
                               properties=self.props, born_timestamps=self.born)
        n = self.count
        bodies = self.bodies
        if isinstance(bodies, BytesColumn):
            bodies = bodies.to_list()
        keys = self.keys or [None] * n
        props = self.props or [None] * n
        born = self.born.tolist() if isinstance(self.born, np.ndarray) else self.born
        return [Message(self.topic, b, keys=() if k is None else k, properties=p,
                        queue_id=self.index, born_timestamp=t or None)
                for b, k, p, t in zip(bodies, keys, props, born)]


def _columns(part: _Part, cols, marks: dict[int, str]) -> None:
    """Fill ``part``'s columns from the decoded records ``cols``."""
    recs = cols.records
    n = recs.shape[1]
    data = cols.data
    ts_col = recs[bk.R_TIMESTAMP]
    key_len = recs[bk.R_KEY_LEN]
    lens = recs[bk.R_VALUE_LEN]
    part.count = n
    if not (key_len >= 0).any() and not recs[bk.R_HEADER_COUNT].any() and \
            ts_col.min() > 0 and lens.min() >= 0:
        # the plain case: value and timestamp only; the values gathered into one buffer
        # (compiled) and handed to the store as a BytesColumn, no bytes object each
        part.born = ts_col.copy()
        if n < COLUMNS_FROM:          # stored as messages (item()): a bytes object each
            raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
            part.bodies = [raw[a:a + m] for a, m in zip(recs[bk.R_VALUE_AT].tolist(),
                                                         lens.tolist())]
            return _mark(part, marks)
        off = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        out = np.empty(int(off[-1]), np.uint8)
        src = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        bk.gather_values(src, recs, out)
        part.bodies = BytesColumn(out, off)
    else:
        val_at, val_len = recs[bk.R_VALUE_AT].tolist(), lens.tolist()
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        ts = ts_col.tolist()
        key_at, key_len = recs[bk.R_KEY_AT].tolist(), key_len.tolist()
        hcount = recs[bk.R_HEADER_COUNT].tolist()
        bodies, keys, props, born = [], [], [], []
        for i in range(n):
            kl, vl = key_len[i], val_len[i]
            key = None if kl < 0 else raw[key_at[i]:key_at[i] + kl]
            value = None if vl < 0 else raw[val_at[i]:val_at[i] + vl]
            headers = ()
            if hcount[i]:
                headers = [(k.decode("utf-8"), v) for k, v in cols.record_headers(i)]
            body, k, p, t = to_fields(key, value, ts[i], headers)
            bodies.append(body)
            keys.append(k[0] if k else None)
            props.append(p)
            born.append(t)
        part.bodies, part.born = bodies, born
        part.keys = keys if any(k is not None for k in keys) else None
        part.props = props if any(p is not None for p in props) else None
    _mark(part, marks)


def _mark(part: _Part, marks: dict[int, str]) -> None:
    """The idempotent producer's sequence mark on each batch's first record."""
    if marks:
        if part.props is None:
            part.props = [None] * part.count
        for first, mark in marks.items():
            p = dict(part.props[first] or {})
            p[PROP] = mark
            part.props[first] = p


def _prepare(broker, topic: str, pd, part: _Part) -> None:
    if pd.records is None:
        part.code, part.message = ke.INVALID_RECORD, "no record set"
        return
    try:
        cols = decode_record_set(pd.records)
    except RecordBatchError as exc:
        part.code, part.message = exc.error_code, str(exc)
        return
    batches = cols.batches
    pids = batches[bk.B_PRODUCER_ID]
    marks: dict[int, str] = {}
    if (pids >= 0).any():
        seqs = sequences(broker)
        for b in range(cols.batch_count):
            pid = int(pids[b])
            if pid < 0:
                continue
            epoch = int(batches[bk.B_PRODUCER_EPOCH, b])
            seq = int(batches[bk.B_BASE_SEQUENCE, b])
            count = int(batches[bk.B_COUNT, b])
            code, offset, entry = seqs.check(pid, epoch, topic, part.index, seq, count)
            if code == ke.DUPLICATE_SEQUENCE_NUMBER and cols.batch_count == 1:
                # Kafka answers a duplicate of a recent batch as a success, with its offset
                part.offset = offset
                return
            if code != ke.NONE:
                for pid_, e, _first in part.seqs:
                    seqs.failed(pid_, topic, part.index, e)
                part.seqs = []
                part.code, part.message = code, f"producer {pid} epoch {epoch} sequence {seq}"
                return
            first = int(batches[bk.B_FIRST_RECORD, b])
            part.seqs.append((pid, entry, first))
            marks[first] = f"{pid}:{epoch}:{seq}:{count}"
    _columns(part, cols, marks)


async def _put_direct(broker, parts: list[_Part]) -> None:
    """Async flush: every partition's records with one ``store.put_many`` (large partitions
    as column batches, no Message object each; the small ones joined into one message
    batch; one hold of the put lock, one dispatch wake-up) on the send batcher's writer
    thread, off the event loop (``SendBatcher.put_soon``: requests arriving while it stores
    share its next put; a put returns once the records are in the page cache)."""
    stored = [p for p in parts if p.count and p.code == ke.NONE]
    results = await broker.batcher.put_soon([p.item() for p in stored])
    broker.puts += 1
    broker.put_messages += sum(p.count for p in stored)
    _answers(stored, results)


async def _store_all(broker, parts: list[_Part]) -> None:
    """Sync flush: the partitions as column batches in one submission to the send batcher
    (group commit with everything else arriving, any connection or protocol: one fsync
    covers them all, no Message object per record); a partition refused as bad input fails
    alone."""
    stored = [p for p in parts if p.count and p.code == ke.NONE]
    _answers(stored, await broker.batcher.submit_many([p.item() for p in stored]))


def _answers(stored: list[_Part], results: list) -> None:
    for p, r in zip(stored, results):
        if isinstance(r, StrataError):
            p.code, p.message = ke.code_for(r), str(r)
        elif isinstance(r, BaseException):
            raise r
        else:
            _settle(p, r[0])


def _settle(p: _Part, first) -> None:
    if first.status is PutStatus.FLUSH_DISK_TIMEOUT:
        p.code, p.message = ke.REQUEST_TIMED_OUT, "the fsync did not complete in time"
    else:
        p.offset = first.queue_offset


@api.handles(0, 3, 9, flexible_from=9)
async def produce(ctx: api.RequestContext, request):
    broker = ctx.broker
    acks = request.acks
    parts_by_topic: list[tuple[str, list[_Part]]] = []
    for td in request.topic_data:
        tparts: list[_Part] = []
        parts_by_topic.append((td.name, tparts))
        code, n = await partitions(broker, td.name, create=True)
        for pd in td.partition_data:
            part = _Part(td.name, pd.index)
            tparts.append(part)
            if acks not in (0, 1, -1):
                part.code = ke.INVALID_REQUIRED_ACKS
            elif request.transactional_id is not None:
                part.code = ke.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif code != ke.NONE:
                part.code = code
            elif not 0 <= pd.index < n:
                part.code = ke.UNKNOWN_TOPIC_OR_PARTITION
            else:
                _prepare(broker, td.name, pd, part)
    parts = [p for _t, ps in parts_by_topic for p in ps]
    if any(p.count and p.code == ke.NONE for p in parts):
        try:
            if broker.flush_sync:
                await _store_all(broker, parts)
            else:
                await _put_direct(broker, parts)
            await broker.until_dispatched(broker.store.confirmed_offset())
        except StrataError as exc:
            code = ke.code_for(exc)
            log.warning("kafka %s: produce failed: %s", ctx.peer, exc)
            for p in parts:
                if p.count and p.code == ke.NONE and p.offset < 0:
                    p.code, p.message = code, str(exc)
    seqs = broker.state.get("sequences")
    if seqs is not None:
        for p in parts:
            for pid, entry, first in p.seqs:
                if p.code == ke.NONE and p.offset >= 0:
                    seqs.stored(entry, p.offset + first)
                else:
                    seqs.failed(pid, p.topic, p.index, entry)
        await seqs.maybe_persist()
    if broker.metrics is not None:
        m = broker.metrics
        for p in parts:
            if p.count and p.code == ke.NONE:
                m.child(m.sent, p.topic).inc(p.count)
    if acks == 0:
        return None
    store = broker.store
    return ProduceResponse(
        responses=[TopicResponse(name=t, partition_responses=[
            PartitionResponse(index=p.index, error_code=p.code, base_offset=p.offset,
                              log_append_time_ms=-1,
                              log_start_offset=(store.min_offset(t, p.index)
                                                if p.code == ke.NONE else -1),
                              record_errors=[], error_message=p.message)
            for p in ps]) for t, ps in parts_by_topic],
        throttle_time_ms=0)
