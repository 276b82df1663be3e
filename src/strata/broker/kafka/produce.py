"""Produce (key 0): each partition's record set is decoded (``record_batch``, compiled), its
records become strata messages (``mapping``), and the whole request goes to the shared send
batcher as one submission, so requests arriving together share one ``put_batch`` (and, with
``--flush sync``, one fsync, which every acks=1/all answer waits for). acks=0 sends nothing
back. Idempotent batches are checked against the producer's last sequences first
(``idempotence``).
"""

from __future__ import annotations

import logging

import numpy as np

from strata.broker.kafka import api
from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import errors as ke
from strata.broker.kafka.idempotence import PROP, sequences
from strata.broker.kafka.mapping import to_message
from strata.broker.kafka.record_batch import RecordBatchError, decode_record_set
from strata.broker.kafka.topics import partitions
from strata.errors import InvalidInputError, StrataError
from strata.store.message import Message, PutStatus

log = logging.getLogger(__name__)

ProduceResponse = api.response_class(0)
TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse


class _Part:
    """One partition of the request: its messages' place in the submission, or its error."""

    __slots__ = ("topic", "index", "code", "message", "start", "count", "offset", "seqs")

    def __init__(self, topic: str, index: int) -> None:
        self.topic = topic
        self.index = index
        self.code = ke.NONE
        self.message: str | None = None
        self.start = self.count = 0
        self.offset = -1
        self.seqs: list = []         # (pid, entry, the batch's first record in the set)


def _messages(topic: str, part: int, cols, out: list[Message]) -> None:
    """Append the strata messages of the records in ``cols`` to ``out``."""
    recs = cols.records
    n = recs.shape[1]
    data = cols.data
    ts = recs[bk.R_TIMESTAMP].tolist()
    key_len = recs[bk.R_KEY_LEN]
    val_at, val_len = recs[bk.R_VALUE_AT].tolist(), recs[bk.R_VALUE_LEN].tolist()
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if not (key_len >= 0).any() and not recs[bk.R_HEADER_COUNT].any() and \
            min(ts) > 0 and min(val_len) >= 0:
        # the plain case: value and timestamp only
        out.extend(Message(topic, raw[a:a + n_], queue_id=part, born_timestamp=t)
                   for a, n_, t in zip(val_at, val_len, ts))
        return
    key_at, key_len = recs[bk.R_KEY_AT].tolist(), key_len.tolist()
    hcount = recs[bk.R_HEADER_COUNT].tolist()
    for i in range(n):
        kl, vl = key_len[i], val_len[i]
        key = None if kl < 0 else raw[key_at[i]:key_at[i] + kl]
        value = None if vl < 0 else raw[val_at[i]:val_at[i] + vl]
        headers = ()
        if hcount[i]:
            headers = [(k.decode("utf-8"), v) for k, v in cols.record_headers(i)]
        out.append(to_message(topic, part, key, value, ts[i], headers))


def _prepare(broker, topic: str, pd, part: _Part, msgs: list[Message]) -> None:
    if pd.records is None:
        part.code, part.message = ke.INVALID_RECORD, "no record set"
        return
    try:
        cols = decode_record_set(bytes(pd.records) if not isinstance(pd.records, bytes)
                                 else pd.records)
    except RecordBatchError as exc:
        part.code, part.message = exc.error_code, str(exc)
        return
    batches = cols.batches
    pids = batches[bk.B_PRODUCER_ID]
    start = len(msgs)
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
    _messages(topic, part.index, cols, msgs)
    for first, mark in marks.items():
        m = msgs[start + first]
        props = dict(m.properties or {})
        props[PROP] = mark
        m.properties = props
    part.start, part.count = start, len(msgs) - start


async def _store_all(broker, msgs: list[Message], parts: list[_Part]) -> None:
    """One submission for the whole request; if it is refused as bad input, each partition
    alone, so one partition's bad message fails that partition only."""
    stored = [p for p in parts if p.count]
    try:
        results = await broker.batcher.submit(msgs)
    except InvalidInputError as exc:
        if len(stored) == 1:
            stored[0].code, stored[0].message = ke.code_for(exc), str(exc)
            return
        for p in stored:
            try:
                own = await broker.batcher.submit(msgs[p.start:p.start + p.count])
            except InvalidInputError as exc1:
                p.code, p.message = ke.code_for(exc1), str(exc1)
            else:
                _settle(p, own[0])
        return
    for p in stored:
        _settle(p, results[p.start])


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
    msgs: list[Message] = []
    for td in request.topic_data:
        tparts: list[_Part] = []
        parts_by_topic.append((td.name, tparts))
        code, n = partitions(broker, td.name, create=True)
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
                _prepare(broker, td.name, pd, part, msgs)
    parts = [p for _t, ps in parts_by_topic for p in ps]
    if msgs:
        try:
            await _store_all(broker, msgs, parts)
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
        seqs.maybe_snapshot()
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
