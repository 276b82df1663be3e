"""Protobuf messages of the RocketMQ 5 protocol <-> strata's store messages.

What the protocol carries as system properties and the store has no field for is kept in the
record's properties under RocketMQ's own names: the client's message id as ``UNIQ_KEY``, a
FIFO message's group as ``__SHARDINGKEY``, a delay message's delivery time (ms) as
``TIMER_DELIVER_MS``, a transactional message's mark as ``TRAN_MSG``. Tags and keys are the
record's own fields.
"""

from __future__ import annotations

import functools
import gzip
import ipaddress
import time
import zlib
from datetime import datetime, timezone

from strata.broker.errors import InvalidMessageError
from strata.broker.properties import (PROP_DELIVER_MS, PROP_HELD_ID, PROP_MESSAGE_GROUP,
                                      PROP_TRANSACTION)
from strata.broker.rocketmq.protocol import Code, MessageType, pb
from strata.format.record import PROP_UNIQ_KEY, RESERVED_PROPERTIES
from strata.store.message import Message, StoredMessage

SYSTEM_PROPERTIES = RESERVED_PROPERTIES | {PROP_UNIQ_KEY, PROP_MESSAGE_GROUP, PROP_DELIVER_MS,
                                           PROP_TRANSACTION, PROP_HELD_ID}
ACCEPTED_TYPES = (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY,
                  MessageType.TRANSACTION)
MAX_DELAY_MS = 40 * 24 * 3600 * 1000      # 40 days, as RocketMQ's timer allows at most
# rocketmq-python-client 5.1.2 puts the delivery time's milliseconds into the Timestamp's
# seconds field; a seconds value above this (the year 5138) is read as milliseconds
MS_IN_SECONDS_ABOVE = 10 ** 11


@functools.lru_cache(maxsize=1024)      # a client sends from one host: parse it once
def _born_host(text: str) -> tuple[str, int] | None:
    try:
        return (str(ipaddress.ip_address(text)), 0)
    except ValueError:
        return None


def delivery_ms(sp) -> int | None:
    """A message's delivery timestamp in ms since the epoch, or None if it has none."""
    if not sp.HasField("delivery_timestamp"):
        return None
    ts = sp.delivery_timestamp
    if ts.seconds > MS_IN_SECONDS_ABOVE:
        return ts.seconds
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _check_delivery(deliver: int, now: int) -> None:
    if deliver - now > MAX_DELAY_MS:
        when = datetime.fromtimestamp(deliver / 1000, timezone.utc).isoformat(
            timespec="seconds") if deliver < 253402300800000 else f"{deliver} ms after the epoch"
        raise InvalidMessageError(
            Code.ILLEGAL_DELIVERY_TIME,
            f"delivery time {when} is {(deliver - now) / 86_400_000:.1f} days ahead; this "
            f"broker holds delay messages at most {MAX_DELAY_MS // 86_400_000} days")


def to_store(m, topic: str, max_body_size: int, now_ms: int | None = None) -> Message:
    """A store message for a protocol ``Message`` (its topic already checked); raises
    InvalidMessageError with the protocol's status code and a sentence. A delivery time is
    checked against ``now_ms`` (the clock's by default)."""
    sp = m.system_properties
    mtype = sp.message_type
    if mtype not in ACCEPTED_TYPES and mtype != MessageType.MESSAGE_TYPE_UNSPECIFIED:
        raise InvalidMessageError(
            Code.UNSUPPORTED, f"{MessageType.Name(mtype)} messages are not supported by this "
            "broker yet (NORMAL, FIFO, DELAY and TRANSACTION are)")
    group = sp.message_group if sp.HasField("message_group") else None
    if mtype == MessageType.FIFO and not group:
        raise InvalidMessageError(Code.ILLEGAL_MESSAGE_GROUP,
                                  "a FIFO message needs a message group")
    deliver = delivery_ms(sp)
    if mtype == MessageType.DELAY and deliver is None:
        raise InvalidMessageError(Code.ILLEGAL_DELIVERY_TIME,
                                  "a DELAY message needs a delivery timestamp")
    if deliver is not None and mtype not in (MessageType.DELAY,
                                             MessageType.MESSAGE_TYPE_UNSPECIFIED):
        raise InvalidMessageError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"a {MessageType.Name(mtype)} message cannot carry a delivery timestamp")
    if deliver is not None:
        _check_delivery(deliver, time.time_ns() // 1_000_000 if now_ms is None else now_ms)
    body = m.body
    if sp.body_encoding == pb.Encoding.GZIP:
        try:
            d = zlib.decompressobj(wbits=31)
            body = d.decompress(body, max_body_size + 1)
        except (zlib.error, gzip.BadGzipFile) as exc:
            raise InvalidMessageError(Code.MESSAGE_CORRUPTED,
                                      f"body is not valid gzip: {exc}") from None
    if not body:
        raise InvalidMessageError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_body_size:
        raise InvalidMessageError(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body is {len(body)} bytes, above this "
            f"broker's limit of {max_body_size} bytes")
    props = dict(m.user_properties)
    clash = SYSTEM_PROPERTIES.intersection(props)
    if clash:
        raise InvalidMessageError(
            Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property name(s) {sorted(clash)} are "
            "reserved for system properties")
    if sp.message_id:
        props[PROP_UNIQ_KEY] = sp.message_id
    if group:
        props[PROP_MESSAGE_GROUP] = group
    if deliver is not None:
        props[PROP_DELIVER_MS] = str(deliver)
    if mtype == MessageType.TRANSACTION:
        props[PROP_TRANSACTION] = "true"
    born = sp.born_timestamp
    born_ms = born.seconds * 1000 + born.nanos // 1_000_000 if sp.HasField("born_timestamp") \
        else None
    return Message(topic, bytes(body), keys=tuple(sp.keys), tags=sp.tag if sp.HasField("tag")
                   and sp.tag else None, properties=props or None, shard_key=group,
                   born_timestamp=born_ms if born_ms and born_ms > 0 else None,
                   born_host=_born_host(sp.born_host) if sp.born_host else None)


def _set_ms(ts, ms: int) -> None:
    ts.seconds, ts.nanos = divmod(ms, 1000)
    ts.nanos *= 1_000_000


def to_protocol(sm: StoredMessage, receipt_handle: str, attempt: int,
                invisible_ms: int):
    """The protocol ``Message`` a consumer receives for a stored message."""
    m = pb.Message()
    m.topic.name = sm.topic
    props = sm.properties
    uniq = props.pop(PROP_UNIQ_KEY, None) or sm.msg_id
    group = props.pop(PROP_MESSAGE_GROUP, None)
    deliver = props.pop(PROP_DELIVER_MS, None)
    transactional = props.pop(PROP_TRANSACTION, None)
    props.pop(PROP_HELD_ID, None)
    m.user_properties.update(props)
    m.body = sm.body
    sp = m.system_properties
    if sm.tags:
        sp.tag = sm.tags
    sp.keys.extend(sm.keys)
    sp.message_id = uniq
    sp.body_digest.type = pb.DigestType.CRC32
    sp.body_digest.checksum = format(zlib.crc32(sm.body) & 0xFFFFFFFF, "08X")
    sp.body_encoding = pb.Encoding.IDENTITY
    sp.message_type = (MessageType.FIFO if group else MessageType.DELAY if deliver
                       else MessageType.TRANSACTION if transactional else MessageType.NORMAL)
    if deliver is not None and deliver.isdigit():
        _set_ms(sp.delivery_timestamp, int(deliver))
    _set_ms(sp.born_timestamp, sm.born_timestamp)
    sp.born_host = sm.born_host[0]
    _set_ms(sp.store_timestamp, sm.store_timestamp)
    sp.store_host = f"{sm.store_host[0]}:{sm.store_host[1]}"
    sp.receipt_handle = receipt_handle
    sp.queue_id = sm.queue_id
    sp.queue_offset = sm.queue_offset
    sp.invisible_duration.seconds, ms = divmod(invisible_ms, 1000)
    sp.invisible_duration.nanos = ms * 1_000_000
    sp.delivery_attempt = attempt
    if group:
        sp.message_group = group
    return m
