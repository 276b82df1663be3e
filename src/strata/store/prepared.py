"""Messages turned into record parts: validation and encoding before the put lock.

A put validates and encodes every message first (so a bad one refuses the whole batch before a
byte is written), keeping the variable parts of each record as plain columns: a
``PreparedBatch`` (``strata.store.prepared_batch``), which under the put lock chooses queues
and gives the records' headers.
"""

from __future__ import annotations

from itertools import repeat
from operator import add, attrgetter
from typing import Sequence

import numpy as np

from strata.errors import InvalidInputError, MessageTooLargeError
from strata.format import columns as col
from strata.format import column_walk, object_gather
from strata.format import record as rec
from strata.format.record_encoding import encode_records
from strata.store.message import EXT_DEFAULTS, EXT_NAMES, Message
from strata.store.prepared_batch import BORN_AT_PUT, COLUMNAR_BATCH, PreparedBatch  # noqa: F401

BLANK_HEADER = bytes(rec.HEADER_SIZE)

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
_NO_TEXT = col.MessageText(None, None, None, None, None, None)   # plain messages' text


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
        first = msgs[0]
        walked = None
        if first.__class__ is Message and first._ext is not None:
            # a rich batch, it seems: the compiled walk checks every message's type and fields
            # itself, so the C-speed passes below (types, _ext of each) are not needed first
            walked = object_gather.walk(msgs, Message, self.max_body)
            if walked is not None:
                return self._prepare_walked(msgs, walked)
        if set(map(type, msgs)) != {Message}:
            return None
        exts = list(map(_GET_EXT, msgs))
        plain = exts.count(None) == n
        columns = None
        if not plain:   # keys, tags, properties, born timestamps, shard keys; no routing, flags
            if first._ext is None:   # (else walked above)
                walked = object_gather.walk(msgs, Message, self.max_body)   # one compiled walk
                if walked is not None:
                    return self._prepare_walked(msgs, walked)
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

    def _prepare_walked(self, msgs: Sequence[Message], walked: object_gather.Walked
                        ) -> "PreparedBatch | None":
        """``_prepare_rich`` of a batch read by ``object_gather.walk``."""
        names, codes = walked.topics, walked.topic_codes
        if names is None or len(set(names)) < len(names):   # many, or equal objects
            names, codes = _numbered(list(map(_GET_TOPIC, msgs)))
        return self._prepare_rich(msgs, names, codes, walked.bodies, (walked.text, walked.born),
                                  None)

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
            enc = encode_records(prefixes[0] if codes is None else prefixes,
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
        walked = column_walk.walk_lists(keys, tags, properties, n)   # Python lists: compiled
        if walked is not None:
            key_col, groups, tag_col, prop_col = walked
        else:
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
        enc = encode_records(prefix, body_col, keys=key_col, key_groups=groups,
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
