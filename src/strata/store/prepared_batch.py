"""A prepared batch under the put lock: queue choice and the records' header columns.

``Encoder`` (``strata.store.prepared``) validates and encodes a batch before the put lock into a
``PreparedBatch``: the variable parts of its records as columns. Under the lock the store asks
it for queues and queue offsets (``choose_queues``: given, by shard key or round-robin) and
then for the records in one of two shapes: ``records()`` (one list per record, for small
batches and the per-record writer) or ``headers()`` (a numpy array of fixed headers, for the
vectorised writer of large batches).
"""

from __future__ import annotations

from itertools import repeat
from typing import Sequence

import numpy as np
from crc32c import crc32c

from strata.errors import InvalidInputError
from strata.format import columns as col
from strata.format import record as rec
from strata.format.record_batch import HEADER_DTYPE
from strata.store.message import EXT_NAMES, Message

COLUMNAR_BATCH = 32  # from this many messages on, queue choice and headers use numpy
# A message without a born timestamp is born at its put (its batch's store timestamp: in the
# embedded store the put call is the producer); in the born columns: "not given".
BORN_AT_PUT = col.BORN_AT_PUT
_ROUTING_AT = EXT_NAMES.index("queue_id")
_SHARD_AT = EXT_NAMES.index("shard_key")
_NO_SHARDS = col.BytesColumn.trusted(np.zeros(0, np.uint8), np.zeros(1, np.int64))
_ALL = np.zeros(0, bool)   # every message has a shard key


def round_robin_start(topic: str, n_q: int, queue_next: dict[tuple[str, int], int],
                      round_robin: dict[str, int],
                      batch_next: dict[tuple[str, int], int] | None = None) -> int:
    """Where round-robin goes on for ``topic``: its position since the store opened, or, for the
    first round-robin message after an open, the first of its queues that holds the fewest
    offsets (``batch_next``: next offsets already taken earlier in the same batch). That is
    where an unbroken round-robin would go next, so a process that opens the store for a few
    puts at a time (a Spark sink commit, a script) does not pile them onto queue 0."""
    i = round_robin.get(topic)
    if i is None:
        pending = batch_next or {}
        counts = [pending.get((topic, q), queue_next.get((topic, q), 0)) for q in range(n_q)]
        i = counts.index(min(counts))
    return i


class PreparedBatch:
    """The encoded, validated parts of a batch's records (columns, one entry per message)."""

    __slots__ = ("msgs", "totals", "images", "blob", "body_lens", "props_lens", "topic_lens", "born",
                 "special", "single_topic", "routed", "default_sys", "queue_ids",
                 "queue_offsets", "fixed_queue", "shards", "topic_names", "topic_codes",
                 "vector_queues")

    def __init__(self, msgs: Sequence[Message] | None) -> None:
        self.msgs = msgs  # None for a batch of columns (Encoder.prepare_columns)
        self.totals: list[int] = []
        # each record whole, its fixed header still zero (the writer fills it in): zeros, born
        # host, store host, topic, properties, body, trailer
        self.images: list[bytes] = []
        # or all records in one piece (headers and trailers zeroed), from the plain fast path
        self.blob: bytes | None = None
        # one entry per message, or (plain fast path, where all are equal) one int
        self.body_lens: list[int] = []
        self.props_lens: list[int] | int = []
        self.topic_lens: list[int] | int = []
        # born timestamps (ms), one per message (BORN_AT_PUT: not given), or None: none given
        self.born: list[int] | np.ndarray | None = []
        # (index, flag, sys_flag, prepared_transaction_offset, reconsume_times) of messages
        # that set any of them or a born host; every other record has the default values
        self.special: list[tuple[int, int, int, int, int]] = []
        self.single_topic: str | None = None
        self.routed = False
        self.default_sys = 0
        self.queue_ids: list[int] | np.ndarray = []
        self.queue_offsets: list[int] | np.ndarray = []
        # columns put to one queue (put_columns with a queue_id)
        self.fixed_queue: int | None = None
        # (shard keys as a BytesColumn, which messages have one: None for all) of a large
        # batch whose messages have shard keys (the others go round-robin)
        self.shards: tuple[col.BytesColumn, np.ndarray | None] | None = None
        # a batch from _prepare_rich: its topics (in order of first appearance) and each
        # message's index in them (None: one topic), queues chosen by _vector_queues
        self.topic_names: list[str] = []
        self.topic_codes: np.ndarray | None = None
        self.vector_queues = False

    def __len__(self) -> int:
        return len(self.totals)

    @property
    def columnar(self) -> bool:
        """Written by the vectorised writer (``headers()``, ``record_bytes()``)."""
        return self.msgs is None or len(self.totals) >= COLUMNAR_BATCH

    # ------------------------------------------------------------------ under the put lock

    def choose_queues(self, queue_counts: dict[str, int], default_queues: int,
                      queue_next: dict[tuple[str, int], int], round_robin: dict[str, int]
                      ) -> tuple[dict[tuple[str, int], int], dict[str, int], dict[str, int]]:
        """Queue id and queue offset of every message (nothing shared changes here).

        Returns (next offset per touched queue, round-robin positions, topics to create).
        Queue choice: ``queue_id`` if given, else a stable hash of ``shard_key``, else
        round-robin per topic; offsets are consecutive per queue.
        """
        topic = self.single_topic
        if self.fixed_queue is not None:
            return self._one_queue(topic, self.fixed_queue, queue_counts, default_queues,
                                   queue_next)
        if self.vector_queues:
            return self._vector_queues(queue_counts, default_queues, queue_next, round_robin)
        if self.msgs is None:   # columns, round-robin
            return self._round_robin_columns(topic, queue_counts, default_queues, queue_next,
                                             round_robin)
        if topic is not None and not self.routed and self.columnar:
            return self._round_robin_columns(topic, queue_counts, default_queues, queue_next,
                                             round_robin)
        new_topics: dict[str, int] = {}
        rr_local: dict[str, int] = {}
        updates: dict[tuple[str, int], int] = {}
        qids, qoffs = [], []
        for m in self.msgs:
            topic = m.topic
            n_q = queue_counts.get(topic)
            if n_q is None:
                n_q = new_topics.setdefault(topic, default_queues)
            ext = m._ext  # None: topic and body only (see Message)
            qid = None if ext is None else ext[_ROUTING_AT]
            if qid is None:
                if ext is None or ext[_SHARD_AT] is None:
                    i = rr_local.get(topic)
                    if i is None:
                        i = round_robin_start(topic, n_q, queue_next, round_robin, updates)
                    rr_local[topic] = i + 1
                    qid = i % n_q
                else:
                    qid = crc32c(str(ext[_SHARD_AT]).encode("utf-8")) % n_q
            elif qid >= n_q:
                raise InvalidInputError(
                    f"queue_id {qid} does not exist: topic {topic!r} has {n_q} queues "
                    f"(0..{n_q - 1})")
            key = (topic, qid)
            nxt = updates.get(key)
            if nxt is None:
                nxt = queue_next.get(key, 0)
            qids.append(qid)
            qoffs.append(nxt)
            updates[key] = nxt + 1
        self.queue_ids, self.queue_offsets = qids, qoffs
        return updates, rr_local, new_topics

    def _one_queue(self, topic: str, qid: int, queue_counts: dict[str, int],
                   default_queues: int, queue_next: dict[tuple[str, int], int]):
        """Every message to queue ``qid`` of ``topic``, in order."""
        new_topics = {}
        n_q = queue_counts.get(topic)
        if n_q is None:
            n_q = new_topics[topic] = default_queues
        if qid >= n_q:
            raise InvalidInputError(
                f"queue_id {qid} does not exist: topic {topic!r} has {n_q} queues "
                f"(0..{n_q - 1})")
        n = len(self.totals)
        base = queue_next.get((topic, qid), 0)
        self.queue_ids = np.full(n, qid, np.int64)
        self.queue_offsets = np.arange(base, base + n, dtype=np.int64)
        return {(topic, qid): base + n}, {}, new_topics

    def _vector_queues(self, queue_counts: dict[str, int], default_queues: int,
                       queue_next: dict[tuple[str, int], int], round_robin: dict[str, int]):
        """Queues of a batch from ``_prepare_rich`` in one compiled pass
        (``column_kernels.choose_queues``): a message with a shard key to the queue of its
        key's hash (CRC32C of its UTF-8 bytes modulo the queue count, as the per-message
        path), the others round-robin per topic; offsets consecutive per queue in batch
        order."""
        new_topics: dict[str, int] = {}
        names = self.topic_names
        n_qs = []
        for topic in names:
            n_q = queue_counts.get(topic)
            if n_q is None:
                n_q = new_topics[topic] = default_queues
            n_qs.append(n_q)
        n = len(self.totals)
        codes = self.topic_codes if self.topic_codes is not None else np.zeros(n, np.int64)
        shard_col, has = self.shards if self.shards is not None else (_NO_SHARDS, None)
        if self.shards is None:       # round-robin topics: where each goes on (0: none)
            rr_topics = range(len(names))
        elif has is None:
            rr_topics = ()
        else:
            rr_topics = np.unique(codes[~has]).tolist()
        starts = [0] * len(names)
        for t in rr_topics:
            starts[t] = round_robin_start(names[t], n_qs[t], queue_next, round_robin)
        base_at = [0]
        for q in n_qs:
            base_at.append(base_at[-1] + q)
        keys = [(t, q) for t, n_q in zip(names, n_qs) for q in range(n_q)]
        nxt = np.array([queue_next.get(k, 0) for k in keys], np.int64)
        before = nxt.copy()
        rr_count = np.zeros(len(names), np.int64)
        qids = np.empty(n, np.int64)
        qoffs = np.empty(n, np.int64)
        col.kernels().choose_queues(codes, shard_col.data, shard_col.offsets,
                                    _ALL if has is None else has, np.array(n_qs, np.int64),
                                    np.array(starts, np.int64), rr_count,
                                    np.array(base_at, np.int64), nxt, qids, qoffs)
        self.queue_ids, self.queue_offsets = qids, qoffs
        updates = {keys[j]: int(nxt[j]) for j in np.flatnonzero(nxt != before).tolist()}
        rr_local = {t: s + c for t, s, c in zip(names, starts, rr_count.tolist()) if c}
        return updates, rr_local, new_topics

    def _round_robin_columns(self, topic: str, queue_counts: dict[str, int],
                             default_queues: int, queue_next: dict[tuple[str, int], int],
                             round_robin: dict[str, int]):
        """One topic, no routing: message i goes to queue (start + i) % n; within the batch
        it is the (i // n)-th message of its queue."""
        new_topics = {}
        n_q = queue_counts.get(topic)
        if n_q is None:
            n_q = new_topics[topic] = default_queues
        n = len(self.totals)
        start = round_robin_start(topic, n_q, queue_next, round_robin)
        seq = np.arange(n, dtype=np.int64)
        qids = (start + seq) % n_q
        base = np.array([queue_next.get((topic, q), 0) for q in range(n_q)], dtype=np.int64)
        self.queue_ids = qids
        self.queue_offsets = base[qids] + seq // n_q
        counts = np.bincount(qids, minlength=n_q)
        updates = {(topic, q): int(base[q] + counts[q]) for q in range(n_q) if counts[q]}
        return updates, {topic: start + n}, new_topics

    def record_bytes(self) -> bytes:
        """All records back to back, for ``CommitLog.append_headers``."""
        return self.blob if self.blob is not None else b"".join(self.images)

    def born_at(self, store_ts: int) -> list[int] | np.ndarray | int:
        """The born timestamps to write, a message that gave none born at ``store_ts`` (its
        batch's store timestamp): one per message, or one int for all."""
        born = self.born
        if born is None:
            return store_ts
        if isinstance(born, np.ndarray):
            return np.where(born == BORN_AT_PUT, store_ts, born)
        if BORN_AT_PUT in born:
            return [store_ts if t == BORN_AT_PUT else t for t in born]
        return born

    def records(self, store_ts: int) -> list[list]:
        """Per-record lists for ``CommitLog.append_batch``: [total, queue_id, flag,
        queue_offset, sys_flag, born_ts, tx_offset, reconsume, body_len, topic_len,
        props_len, image]; ``store_ts``: the batch's store timestamp (``born_at``)."""
        sys_flag = self.default_sys
        born = self.born_at(store_ts)
        out = [[t, q, 0, o, sys_flag, b, 0, 0, bl, tl, pl, image]
               for t, q, o, b, bl, tl, pl, image in zip(
                   self.totals, _as_list(self.queue_ids), _as_list(self.queue_offsets),
                   repeat(born) if isinstance(born, int) else _as_list(born), self.body_lens,
                   self.topic_lens, self.props_lens, self.images)]
        for i, flag, sys_flag, tx, reconsume in self.special:
            r = out[i]
            r[2], r[4], r[6], r[7] = flag, sys_flag, tx, reconsume
        return out

    def headers(self, store_ts: int) -> np.ndarray:
        """Fixed headers (HEADER_DTYPE) for ``CommitLog.append_headers``; the writer fills in
        the physical offsets, the store timestamp and the CRCs. ``store_ts``: the batch's
        store timestamp (``born_at``)."""
        n = len(self.totals)
        h = np.zeros(n, HEADER_DTYPE)
        h["total"] = self.totals
        h["magic"] = rec.MESSAGE_MAGIC
        h["queue_id"] = self.queue_ids
        h["queue_offset"] = self.queue_offsets
        h["sys_flag"] = self.default_sys
        h["born_ts"] = self.born_at(store_ts)
        h["body_len"] = self.body_lens
        h["topic_len"] = self.topic_lens
        h["props_len"] = self.props_lens
        for i, flag, sys_flag, tx, reconsume in self.special:
            h["flag"][i] = flag
            h["sys_flag"][i] = sys_flag
            h["tx_offset"][i] = tx
            h["reconsume"][i] = reconsume
        return h


def _as_list(values) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else values
