"""A Kafka record <-> a strata message, exactly (docs/kafka.md, "The mapping").

A record's value is the message body; its key, headers and producer timestamp are kept so that
a Kafka consumer gets back the bytes the producer sent (null distinct from empty, binary keys
and header values too). strata's properties are UTF-8 strings, so:

* key: a non-empty UTF-8 key is the message's key (``keys=(key,)``, indexed for
  ``store.query``); any other key (empty, or not UTF-8) is ``KAFKA_KEY_B64`` (base64); a
  null key is neither.
* value: the body; a null value is an empty body with ``KAFKA_NULL_VALUE`` = ``"1"``.
* headers: when their keys are distinct, none is KEYS, TAGS or starts with ``KAFKA_``, and
  every value is non-null UTF-8, each header is a property of its own, in order (a RocketMQ
  consumer sees them as user properties); otherwise all of them go, in order, into
  ``KAFKA_HEADERS``: JSON ``[[key, value], ...]`` with value null, a string (UTF-8 bytes), or
  ``{"b64": "..."}``.
* timestamp: a producer timestamp > 0 is the born timestamp; 0 or negative ones (-1: none)
  are ``KAFKA_TIMESTAMP`` (decimal).

The other way, any stored message (sent by a RocketMQ client or ``store.put`` too) reads as
a record: key = its keys joined by a space (RocketMQ's KEYS form) unless ``KAFKA_KEY_B64``;
headers = ``KAFKA_HEADERS``, or else its tag as a ``TAGS`` header, then every property but
the ``KAFKA_`` ones, in order; timestamp = ``KAFKA_TIMESTAMP``, else the born timestamp when
set, else the store timestamp.
"""

from __future__ import annotations

import base64
import json
from typing import Sequence

from strata.format.record import RESERVED_PROPERTIES, StoredMessage
from strata.store.message import Message

KEY_B64 = "KAFKA_KEY_B64"
NULL_VALUE = "KAFKA_NULL_VALUE"
HEADERS = "KAFKA_HEADERS"
TIMESTAMP = "KAFKA_TIMESTAMP"
PREFIX = "KAFKA_"

Header = tuple[str, bytes | None]


def _text(b: bytes) -> str | None:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _headers_as_properties(headers: Sequence[Header], props: dict[str, str]) -> None:
    plain = {}
    for k, v in headers:
        t = None if v is None else _text(v)
        if (t is None or not k or k in plain or k in RESERVED_PROPERTIES
                or k.startswith(PREFIX)):
            break
        plain[k] = t
    else:
        props.update(plain)
        return
    out = []
    for k, v in headers:
        t = None if v is None else _text(v)
        out.append([k, None if v is None else t if t is not None
                    else {"b64": base64.b64encode(v).decode("ascii")}])
    props[HEADERS] = json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def to_message(topic: str, queue_id: int, key: bytes | None, value: bytes | None,
               timestamp: int, headers: Sequence[Header]) -> Message:
    """The strata message that stores one Kafka record."""
    body, keys, props, born = to_fields(key, value, timestamp, headers)
    return Message(topic, body, keys=keys, properties=props, queue_id=queue_id,
                   born_timestamp=born)


def to_fields(key: bytes | None, value: bytes | None, timestamp: int,
              headers: Sequence[Header]
              ) -> tuple[bytes, tuple[str, ...], dict[str, str] | None, int | None]:
    """(body, keys, properties or None, born timestamp or None) that store one record."""
    props: dict[str, str] | None = None
    keys: tuple[str, ...] = ()
    if key is not None:
        t = _text(key) if key else None
        if t:
            keys = (t,)
        else:
            props = {KEY_B64: base64.b64encode(key).decode("ascii")}
    if value is None:
        props = props or {}
        props[NULL_VALUE] = "1"
        value = b""
    if headers:
        props = props or {}
        _headers_as_properties(headers, props)
    born = None
    if timestamp > 0:
        born = timestamp
    else:
        props = props or {}
        props[TIMESTAMP] = str(timestamp)
    return value, keys, props, born


def from_message(m: StoredMessage) -> tuple[bytes | None, bytes | None, int, list[Header]]:
    """(key, value, timestamp, headers) of a stored message, as a Kafka consumer sees it."""
    props = m.properties
    keys = m.keys
    value: bytes | None = m.body
    if not props:
        key = " ".join(keys).encode("utf-8") if keys else None
        tags = m.tags
        ts = m.born_timestamp or m.store_timestamp
        return key, value, ts, ([("TAGS", tags.encode("utf-8"))] if tags is not None else [])
    b64 = props.get(KEY_B64)
    if b64 is not None:
        key = base64.b64decode(b64)
    else:
        key = " ".join(keys).encode("utf-8") if keys else None
    if props.get(NULL_VALUE) == "1":
        value = None
    t = props.get(TIMESTAMP)
    ts = int(t) if t is not None else (m.born_timestamp or m.store_timestamp)
    packed = props.get(HEADERS)
    headers: list[Header]
    if packed is not None:
        headers = [(k, None if v is None else v.encode("utf-8") if isinstance(v, str)
                    else base64.b64decode(v["b64"])) for k, v in json.loads(packed)]
    else:
        tags = m.tags
        headers = [("TAGS", tags.encode("utf-8"))] if tags is not None else []
        headers += [(k, v.encode("utf-8")) for k, v in props.items()
                    if not k.startswith(PREFIX)]
    return key, value, ts, headers
