"""Messages turned into record parts: validation and encoding before the put lock, queue choice
and header columns under it.

A put validates and encodes every message first (so a bad one refuses the whole batch before a
byte is written), keeping the variable parts of each record as plain columns. Under the put lock
the store picks queues and queue offsets and asks for the records in one of two shapes:
``records()`` (one list per record, for small batches and the per-record writer) or
``headers()`` (a numpy array of fixed headers, for the vectorised writer of large batches).
"""

from __future__ import annotations

from itertools import repeat
from operator import add, attrgetter
from typing import Sequence

import numpy as np
from crc32c import crc32c

from strata.errors import InvalidInputError, MessageTooLargeError
from strata.format import columns as col
from strata.format import object_gather
from strata.format import record as rec
from strata.format.record_batch import HEADER_DTYPE
from strata.store.message import EXT_DEFAULTS, EXT_NAMES, Message

BLANK_HEADER = bytes(rec.HEADER_SIZE)
COLUMNAR_BATCH = 32  # from this many messages on, queue choice and headers use numpy
# A message without a born timestamp is born at its put (its batch's store timestamp: in the
# embedded store the put call is the producer); in the born columns: "not given".
BORN_AT_PUT = col.BORN_AT_PUT

# One attribute over all messages at a time: a list per field is half the cost of one tuple
# of fields per message. Message._ext is None for a message of topic and body only.
_GET_TOPIC, _GET_BODY, _GET_EXT = map(attrgetter, ("topic", "body", "_ext"))
# The plain fast path takes keys, tags, properties and born timestamps, but not routing,
# flags or a born host: the places of those in Message._ext.
_ROUTING_AT = EXT_NAMES.index("queue_id")
_SHARD_AT = EXT_NAMES.index("shard_key")
_BORN_AT = EXT_NAMES.index("born_timestamp")
_NOT_PLAIN = [i for i in range(_ROUTING_AT, len(EXT_NAMES)) if i not in (_BORN_AT, _SHARD_AT)]
_ZERO_TRAILER = bytes(rec.TRAILER_SIZE)
_NO_SHARDS = col.BytesColumn.trusted(np.zeros(0, np.uint8), np.zeros(1, np.int64))
_ALL = np.zeros(0, bool)   # every message has a shard key
_NO_TEXT = col.MessageText(None, None, None, None, None, None)   # plain messages' text


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


class Encoder:
    """What a store needs to encode its messages: limits, its host, caches of encoded parts."""

    def __init__(self, store_host: rec.Host, max_body: int, max_record: int,
                 segment_size: int) -> None:
        self.store_host, self.store_v6 = rec.encode_host(store_host)
        self.max_body = max_body
        self.max_record = max_record
        self.segment_size = segment_size
        self.topic_bytes: dict[str, bytes] = {}
        self.host_cache: dict[tuple, tuple[bytes, bool]] = {}
        self.host_sys = rec.SYSFLAG_STORE_HOST_V6 if self.store_v6 else 0
        self.default_sys = self.host_sys | (rec.SYSFLAG_BORN_HOST_V6 if self.store_v6 else 0)

    def topic(self, topic: str) -> bytes:
        tb = self.topic_bytes.get(topic)
        if tb is None:
            tb = rec.encode_topic(topic)
            if len(self.topic_bytes) < 65536:
                self.topic_bytes[topic] = tb
        return tb

    def born_host(self, host) -> tuple[bytes, bool]:
        try:
            cached = self.host_cache.get(host)
        except TypeError:  # a list or other unhashable value
            raise InvalidInputError(
                f"born_host must be an (ip address, port) tuple, got {host!r}") from None
        if cached is None:
            cached = rec.encode_host(host)
            if len(self.host_cache) < 4096:
                self.host_cache[host] = cached
        return cached

    def prepare(self, msgs: Sequence[Message]) -> "PreparedBatch":
        """Validate and encode; raises (InvalidInputError and subclasses) before any change."""
        if len(msgs) >= COLUMNAR_BATCH:
            fast = self._prepare_plain(msgs)
            if fast is not None:
                return fast
        b = PreparedBatch(msgs)
        totals, images, body_lens, props_lens, topic_lens, born = (
            b.totals, b.images, b.body_lens, b.props_lens, b.topic_lens, b.born)
        blank_header = BLANK_HEADER
        topic_bytes = self.topic_bytes
        max_body, max_record = self.max_body, self.max_record
        store_host = self.store_host
        fixed = rec.HEADER_SIZE + rec.TRAILER_SIZE + 2 * len(store_host)  # born host = ours
        pack_trailer = rec.TRAILER.pack
        join = b"".join
        encode_properties = rec.encode_properties
        first_topic = None
        routed = mixed = False
        for i, m in enumerate(msgs):
            if m.__class__ is not Message:
                raise InvalidInputError(f"expected a strata.Message, got {type(m).__name__}")
            topic = m.topic
            tb = topic_bytes.get(topic)
            if tb is None:
                tb = self.topic(topic)
            if topic != first_topic:
                if first_topic is None:
                    first_topic = topic
                else:
                    mixed = True
            body = m.body
            if body.__class__ is not bytes:
                body = _checked_body(body)
            blen = len(body)
            if blen > max_body:
                raise MessageTooLargeError(
                    f"message body of {blen} bytes exceeds max_body_size {max_body}")
            ext = m._ext
            if ext is None:
                pb = b""
                total = fixed + len(tb) + blen
                bh = store_host
                born.append(BORN_AT_PUT)
            else:
                (keys, tags, props, queue_id, shard_key, born_ts, flag, born_host,
                 reconsume, sys_flag, tx_offset) = ext
                pb = encode_properties(keys, tags, props) if keys or tags is not None or \
                    props else b""
                if queue_id is not None or shard_key is not None:
                    routed = True
                if born_host is None and not (sys_flag or flag or reconsume or tx_offset):
                    total = fixed + len(tb) + len(pb) + blen
                    bh = store_host
                else:
                    bh, sys_flag = self._special(born_host, sys_flag)
                    total = fixed - len(store_host) + len(bh) + len(tb) + len(pb) + blen
                    b.special.append((i, flag, sys_flag, tx_offset, reconsume))
                born.append(BORN_AT_PUT if born_ts is None else born_ts)
            if total > max_record:
                raise MessageTooLargeError(f"record of {total} bytes cannot fit a segment of "
                                           f"{self.segment_size} bytes")
            totals.append(total)
            body_lens.append(blen)
            props_lens.append(len(pb))
            topic_lens.append(len(tb))
            images.append(join((blank_header, bh, store_host, tb, pb, body, pack_trailer(total))))
        b.single_topic = first_topic if not mixed else None
        b.routed = routed
        b.default_sys = self.default_sys
        return b

    def _prepare_plain(self, msgs: Sequence[Message]) -> "PreparedBatch | None":
        """``prepare`` for the common large batch, column by column at C speed: one topic,
        bytes bodies, no routing, no born host or flags (keys, tags and properties allowed).
        None when the batch is not like that (``prepare`` then goes message by message, which
        also finds and names any bad input)."""
        n = len(msgs)
        if set(map(type, msgs)) != {Message}:
            return None
        exts = list(map(_GET_EXT, msgs))
        plain = exts.count(None) == n
        columns = None
        if not plain:   # keys, tags, properties, born timestamps, shard keys; no routing, flags
            walked = object_gather.walk(msgs, Message, self.max_body)   # one compiled walk
            if walked is not None:
                names, codes = walked.topics, walked.topic_codes
                if names is None or len(set(names)) < len(names):   # many, or equal objects
                    names, codes = _numbered(list(map(_GET_TOPIC, msgs)))
                return self._prepare_rich(msgs, names, codes, walked.bodies,
                                          (walked.text, walked.born), None)
            # unusual values: gathered by C-speed passes per field
            columns = list(zip(*(exts if None not in exts else
                                 [e or EXT_DEFAULTS for e in exts])))
            if any(columns[i].count(EXT_DEFAULTS[i]) != n for i in _NOT_PLAIN):
                return None
        topics = list(map(_GET_TOPIC, msgs))
        one_topic = topics.count(topics[0]) == n
        bodies = list(map(_GET_BODY, msgs))
        if set(map(type, bodies)) != {bytes}:
            return None
        body_lens = list(map(len, bodies))
        if max(body_lens) > self.max_body:
            return None
        if not plain or not one_topic:
            return self._prepare_rich(msgs, *_numbered(topics), _bodies_of(bodies, body_lens),
                                      (_NO_TEXT, None) if plain else None, columns)
        tb = self.topic(topics[0])
        props_lens = 0
        payloads = bodies
        host = self.store_host
        prefix = BLANK_HEADER + host + host + tb  # header (zeros), born + store host, topic
        fixed = len(prefix) + rec.TRAILER_SIZE
        totals = list(map(add, map(len, payloads), repeat(fixed, n)))
        if max(totals) > self.max_record:
            return None
        b = PreparedBatch(msgs)
        b.totals, b.body_lens, b.props_lens = totals, body_lens, props_lens
        b.topic_lens = len(tb)
        b.born = None  # plain messages only here: all born at the put
        # all records in one join: each payload between the previous record's (zero) trailer
        # and its own prefix; seal_records fills in headers and trailers
        b.blob = b"".join((prefix, (_ZERO_TRAILER + prefix).join(payloads), _ZERO_TRAILER))
        b.single_topic = topics[0]
        b.default_sys = self.default_sys
        return b

    def _prepare_rich(self, msgs: Sequence[Message], names: list[str],
                      codes: np.ndarray | None, bodies: col.BytesColumn,
                      gathered: tuple | None, columns: list[tuple] | None
                      ) -> "PreparedBatch | None":
        """``_prepare_plain`` for messages with keys, tags, properties, born timestamps or
        shard keys, or of several topics (``names``, in order of first appearance, and each
        message's index in them, None: all to the first): the values gathered into columns by one compiled walk (``gathered``:
        ``(MessageText, born)`` from ``object_gather.walk``) or else at C speed from
        ``columns`` (one tuple per ``Message._ext`` field, ``strata.format.columns``), the
        records laid out in compiled code. None when some value is not of the usual kind (the
        message-by-message path then names it)."""
        n = len(msgs)
        try:
            topic_bytes = {t: self.topic(t) for t in names}
        except InvalidInputError:
            return None
        if gathered is not None:
            text, born = gathered
        else:
            text = col.message_text(columns[0], columns[1], columns[2], columns[_SHARD_AT])
            if text is None:
                return None
            born_ts = columns[_BORN_AT]
            no_born = born_ts.count(None)
            born = None if no_born == n else born_ts if not no_born else \
                [BORN_AT_PUT if t is None else t for t in born_ts]
        host = self.store_host
        prefixes = [BLANK_HEADER + host + host + tb for tb in topic_bytes.values()]
        try:
            enc = col.encode_records(prefixes[0] if codes is None else prefixes,
                                     bodies, prefix_of=codes,
                                     keys=text.keys, key_groups=text.key_groups,
                                     tags=text.tags, properties=text.properties,
                                     max_body=self.max_body, max_record=self.max_record)
        except InvalidInputError:
            return None
        b = PreparedBatch(msgs)
        b.totals, b.body_lens, b.props_lens = enc.totals, enc.body_lens, enc.props_lens
        topic_lens = np.array([len(tb) for tb in topic_bytes.values()], np.int64)
        b.topic_lens = int(topic_lens[0]) if codes is None else topic_lens[codes]
        b.born = born
        b.blob = enc.blob
        b.single_topic = names[0] if codes is None else None
        b.topic_names, b.topic_codes = names, codes
        b.default_sys = self.default_sys
        if text.shard_keys is not None:
            b.shards = (text.shard_keys, text.has_shard)
        b.vector_queues = True
        return b

    def prepare_columns(self, topic: str, bodies, *, keys=None, tags=None, properties=None,
                        born_timestamps=None, queue_id: int | None = None) -> "PreparedBatch":
        """``prepare`` for a batch given as columns (``MessageStore.put_columns``): every
        message to ``topic``, to queue ``queue_id`` (None: round-robin); validated and encoded
        in one compiled pass. Raises (InvalidInputError and subclasses) before any change."""
        if queue_id is not None and (type(queue_id) is not int or queue_id < 0):
            raise InvalidInputError(f"queue_id must be an int >= 0 or None, got {queue_id!r}")
        tb = self.topic(topic)
        body_col = bodies if isinstance(bodies, col.BytesColumn) else _bodies_column(bodies)
        n = len(body_col)
        key_col = groups = tag_col = prop_col = None
        if keys is not None:
            key_col, groups = col.keys_column(keys, n)
        if tags is not None:
            tag_col = col.as_column(tags, n, "tags")
        if properties is not None:
            prop_col = col.properties_column(properties, n)
        born = col.born_column(born_timestamps, n)
        host = self.store_host
        prefix = BLANK_HEADER + host + host + tb
        enc = col.encode_records(prefix, body_col, keys=key_col, key_groups=groups,
                                 tags=tag_col, properties=prop_col, max_body=self.max_body,
                                 max_record=self.max_record)
        b = PreparedBatch(None)
        b.totals, b.body_lens, b.props_lens = enc.totals, enc.body_lens, enc.props_lens
        b.topic_lens = len(tb)
        b.born = born
        b.blob = enc.blob
        b.single_topic = topic
        b.default_sys = self.default_sys
        b.fixed_queue = queue_id
        return b

    def _special(self, born_host: rec.Host | None, sys_flag: int) -> tuple[bytes, int]:
        """Born host bytes and sys flag of a message that sets either."""
        if born_host is None:
            bh, flags = self.store_host, self.default_sys
        else:
            bh, v6 = self.born_host(born_host)
            flags = self.host_sys | (rec.SYSFLAG_BORN_HOST_V6 if v6 else 0)
        if sys_flag:
            flags |= sys_flag & ~(rec.SYSFLAG_BORN_HOST_V6 | rec.SYSFLAG_STORE_HOST_V6)
        return bh, flags


def _checked_body(body) -> bytes:
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        raise InvalidInputError("message body must be bytes; encode the str first "
                                "(e.g. body.encode())")
    raise InvalidInputError(f"message body must be bytes, got {type(body).__name__}")


def _numbered(topics: list[str]) -> tuple[list[str], np.ndarray | None]:
    """The distinct topics in first-appearance order, each item's index in them (None: one)."""
    code_of = {t: i for i, t in enumerate(dict.fromkeys(topics))}
    return list(code_of), (None if len(code_of) == 1 else
                           np.fromiter(map(code_of.__getitem__, topics), np.int64, len(topics)))


def _bodies_of(bodies: list[bytes], lens: list[int]) -> col.BytesColumn:
    """Bodies known to be bytes, of lengths ``lens``, as one column (one join)."""
    off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    return col.BytesColumn.trusted(np.frombuffer(b"".join(bodies), np.uint8), off)


def _bodies_column(bodies) -> col.BytesColumn:
    """A sequence of bodies (bytes-like each) as a BytesColumn; str refused as put_batch does."""
    try:
        items = list(bodies)
    except TypeError:
        raise InvalidInputError(f"bodies must be a BytesColumn or a sequence of bytes, got "
                                f"{type(bodies).__name__}") from None
    if set(map(type, items)) <= {bytes}:
        return col.BytesColumn.of(items)
    return col.BytesColumn.of([b if b.__class__ is bytes else _checked_body(b) for b in items])


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
