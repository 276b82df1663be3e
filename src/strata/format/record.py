"""The commit-log message record and blank record: encode, decode, peek, validate.

Layout (little-endian; see docs/format.md for the byte-by-byte description)::

    0  u32 total_length      whole record, this field and the trailer included
    4  u32 magic             MESSAGE_MAGIC, or BLANK_MAGIC for a blank record
    8  u32 crc32c            CRC32C of bytes [12, total_length)
   12  i32 queue_id
   16  i32 flag
   20  i64 queue_offset
   28  i64 physical_offset   commit-log offset of byte 0 of this record
   36  i32 sys_flag          bit 0x10: born host is IPv6, 0x20: store host is IPv6
   40  i64 born_timestamp    ms
   48  i64 store_timestamp   ms
   56  i64 prepared_transaction_offset
   64  i32 reconsume_times
   68  u32 body_length
   72  u16 topic_length
   74  u16 properties_length
   76  born host   (4 or 16 address bytes, u16 port)
    .  store host  (4 or 16 address bytes, u16 port)
    .  topic       (UTF-8)
    .  properties  (entries: u16 name length, name, u16 value length, value; UTF-8)
    .  body
    .  u32 total_length      trailer, equal to the first field

The properties section's own encoding (entries, KEYS/TAGS, the dispatch read) lives in
``record_properties``; its names are re-exported here.

Pure functions only: no file I/O, no threads.
"""

from __future__ import annotations

import ipaddress
import struct
from functools import lru_cache
from operator import itemgetter

try:   # the C descriptor namedtuple's fields use: ~20 ns a read less than property(itemgetter)
    from _collections import _tuplegetter
except ImportError:   # pragma: no cover - another Python implementation
    def _tuplegetter(index: int, doc: str | None):
        return property(itemgetter(index), doc=doc)
from typing import Iterable, Mapping

from crc32c import crc32c

from strata.errors import CorruptRecordError, InvalidInputError, InvalidTopicError
# the properties section lives in its own module; its names stay importable from here
from strata.format.record_properties import (  # noqa: F401  (re-exported)
    _ENTRY_LEN, MAX_PROPERTIES_BYTES, PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, RESERVED_PROPERTIES,
    decode_properties, dispatch_properties, encode_properties, find_property)

MESSAGE_MAGIC = 0x5354_4D31  # "STM1" read as a little-endian u32 spells "1MTS"; any fixed value works
BLANK_MAGIC = 0x5354_4B30

# The fixed header field by field (name, struct code): HEADER, the POS_* positions below,
# record_batch.HEADER_DTYPE and the compiled readers' offsets (record_kernels) all derive from
# this one table.
HEADER_FIELDS = (("total", "I"), ("magic", "I"), ("crc", "I"), ("queue_id", "i"), ("flag", "i"),
                 ("queue_offset", "q"), ("phys", "q"), ("sys_flag", "i"), ("born_ts", "q"),
                 ("store_ts", "q"), ("tx_offset", "q"), ("reconsume", "i"),
                 ("body_len", "I"), ("topic_len", "H"), ("props_len", "H"))
HEADER = struct.Struct("<" + "".join(code for _name, code in HEADER_FIELDS))
HEADER_SIZE = HEADER.size  # 76
FIELD_POS = {name: struct.calcsize("<" + "".join(c for _n, c in HEADER_FIELDS[:i]))
             for i, (name, _code) in enumerate(HEADER_FIELDS)}
TRAILER = struct.Struct("<I")
TRAILER_SIZE = 4
U32 = struct.Struct("<I")
CRC_START = 12  # the CRC covers every byte after the CRC field

# Peekable field positions (bytes from the start of a record).
POS_TOTAL_LENGTH = FIELD_POS["total"]                # 0
POS_MAGIC = FIELD_POS["magic"]                       # 4
POS_CRC = FIELD_POS["crc"]                           # 8
POS_QUEUE_ID = FIELD_POS["queue_id"]                 # 12
POS_FLAG = FIELD_POS["flag"]                         # 16
POS_QUEUE_OFFSET = FIELD_POS["queue_offset"]         # 20
POS_PHYSICAL_OFFSET = FIELD_POS["phys"]              # 28
POS_SYS_FLAG = FIELD_POS["sys_flag"]                 # 36
POS_BORN_TIMESTAMP = FIELD_POS["born_ts"]            # 40
POS_STORE_TIMESTAMP = FIELD_POS["store_ts"]          # 48
POS_TX_OFFSET = FIELD_POS["tx_offset"]               # 56
POS_RECONSUME_TIMES = FIELD_POS["reconsume"]         # 64
POS_BODY_LENGTH = FIELD_POS["body_len"]              # 68
POS_TOPIC_LENGTH = FIELD_POS["topic_len"]            # 72
POS_PROPERTIES_LENGTH = FIELD_POS["props_len"]       # 74
POS_HOSTS = HEADER_SIZE

I32_AT = struct.Struct("<i")
I64_AT = struct.Struct("<q")
U16_AT = struct.Struct("<H")
PEEK = struct.Struct(HEADER.format[:11])  # first 56 bytes: up to and including store_timestamp

SYSFLAG_BORN_HOST_V6 = 0x10
SYSFLAG_STORE_HOST_V6 = 0x20

# A blank record is [u32 length][u32 BLANK_MAGIC] zero bytes ... [u32 length].
BLANK_MIN_SIZE = 12
MAX_TOPIC_BYTES = 127


# --------------------------------------------------------------------------- hosts

Host = tuple[str, int]


def encode_host(host: Host) -> tuple[bytes, bool]:
    """Encode ``(address, port)`` as address bytes + u16 port; returns (bytes, is_ipv6)."""
    try:
        addr_text, port = host
        addr = ipaddress.ip_address(addr_text)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"host must be (ip address, port), got {host!r}") from exc
    if not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise InvalidInputError(f"host port must be an int in 0..65535, got {port!r}")
    return addr.packed + _ENTRY_LEN.pack(port), addr.version == 6


_HOST_CACHE: dict[bytes, Host] = {}


def decode_host(buf, pos: int, ipv6: bool) -> tuple[Host, int]:
    """Decode a host at ``pos``; returns ((address, port), next position)."""
    n = 18 if ipv6 else 6
    raw = bytes(buf[pos:pos + n])
    host = _HOST_CACHE.get(raw)
    if host is None:
        addr = ipaddress.IPv6Address(raw[:16]) if ipv6 else ipaddress.IPv4Address(raw[:4])
        (port,) = U16_AT.unpack_from(raw, n - 2)
        host = (str(addr), port)
        if len(_HOST_CACHE) < 4096:
            _HOST_CACHE[raw] = host
    return host, pos + n



# --------------------------------------------------------------------------- topics


def encode_topic(topic: str) -> bytes:
    """Validate a topic name (``^[%|a-zA-Z0-9_-]{1,127}$``) and return its bytes."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a str, got {type(topic).__name__}")
    if not is_topic_name(topic):
        shown = topic if len(topic) <= 40 else topic[:37] + "..."
        raise InvalidTopicError(
            f"invalid topic name {shown!r} (length {len(topic)}): a topic is 1-127 characters "
            "from [%|a-zA-Z0-9_-]")
    return topic.encode("ascii")


_TOPIC_CHARS = frozenset("%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def is_topic_name(name: str) -> bool:
    """Whether ``name`` is a valid topic name (what ``encode_topic`` accepts)."""
    return 0 < len(name) <= MAX_TOPIC_BYTES and _TOPIC_CHARS.issuperset(name)


# --------------------------------------------------------------------------- records


def record_size(host_bytes: int, topic_len: int, props_len: int, body_len: int) -> int:
    """Total size of a message record with the given variable parts."""
    return HEADER_SIZE + host_bytes + topic_len + props_len + body_len + TRAILER_SIZE


def write_record(buf, pos: int, total: int, queue_id: int, flag: int, queue_offset: int,
                 physical_offset: int, sys_flag: int, born_ts: int, store_ts: int,
                 tx_offset: int, reconsume: int, body_len: int, topic_len: int,
                 props_len: int, tail: bytes) -> None:
    """Write one whole record at ``pos`` of ``buf`` (an mmap or bytearray), CRC last.

    ``tail`` is born host + store host + topic + properties + body, already encoded.
    """
    HEADER.pack_into(buf, pos, total, MESSAGE_MAGIC, 0, queue_id, flag, queue_offset,
                     physical_offset, sys_flag, born_ts, store_ts, tx_offset, reconsume,
                     body_len, topic_len, props_len)
    start = pos + HEADER_SIZE
    end = pos + total - TRAILER_SIZE
    buf[start:end] = tail
    TRAILER.pack_into(buf, end, total)
    with memoryview(buf) as mv:
        U32.pack_into(buf, pos + CRC_START - 4, crc32c(mv[pos + CRC_START:pos + total]))


def write_blank(buf, pos: int, length: int) -> None:
    """Close the rest of a segment: a blank record of ``length`` bytes at ``pos``."""
    if length < BLANK_MIN_SIZE:
        raise ValueError(f"a blank record needs at least {BLANK_MIN_SIZE} bytes, got {length}")
    U32.pack_into(buf, pos, length)
    U32.pack_into(buf, pos + 4, BLANK_MAGIC)
    U32.pack_into(buf, pos + length - TRAILER_SIZE, length)


def encode_record(*, queue_id: int, flag: int, queue_offset: int, physical_offset: int,
                  sys_flag: int, born_ts: int, store_ts: int, tx_offset: int,
                  reconsume: int, born_host: Host, store_host: Host, topic: str,
                  keys: Iterable[str] = (), tags: str | None = None,
                  properties: Mapping[str, str] | None = None, body: bytes = b"") -> bytes:
    """Encode a whole record into new bytes (convenient and slow: tests, tools)."""
    bh, b6 = encode_host(born_host)
    sh, s6 = encode_host(store_host)
    sys_flag &= ~(SYSFLAG_BORN_HOST_V6 | SYSFLAG_STORE_HOST_V6)
    sys_flag |= (SYSFLAG_BORN_HOST_V6 if b6 else 0) | (SYSFLAG_STORE_HOST_V6 if s6 else 0)
    tb = encode_topic(topic)
    pb = encode_properties(keys, tags, properties)
    body = bytes(body)
    total = record_size(len(bh) + len(sh), len(tb), len(pb), len(body))
    buf = bytearray(total)
    write_record(buf, 0, total, queue_id, flag, queue_offset, physical_offset, sys_flag,
                 born_ts, store_ts, tx_offset, reconsume, len(body), len(tb), len(pb),
                 bh + sh + tb + pb + body)
    return bytes(buf)


class StoredMessage(tuple):
    """A message as stored in the commit log: immutable, compared and hashed by value.

    Built cheaply from a record's bytes (one tuple, no decoding): the properties section and
    the two hosts are kept raw, and ``keys``, ``tags``, ``properties``, ``born_host``,
    ``store_host`` and ``msg_id`` are decoded from them when first asked for (cached per
    distinct raw value, so repeated hosts or property sets decode once).
    """

    __slots__ = ()
    FIELDS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "body",
              "born_timestamp", "store_timestamp", "reconsume_times", "flag", "sys_flag",
              "prepared_transaction_offset", "size", "properties_raw", "hosts_raw")

    def __new__(cls, values: Iterable) -> "StoredMessage":
        return tuple.__new__(cls, values)

    def __getnewargs__(self):
        return (tuple(self),)

    topic = _tuplegetter(0, None)
    queue_id = _tuplegetter(1, None)
    queue_offset = _tuplegetter(2, None)
    commitlog_offset = _tuplegetter(3, None)
    body = _tuplegetter(4, None)
    born_timestamp = _tuplegetter(5, None)
    store_timestamp = _tuplegetter(6, None)
    reconsume_times = _tuplegetter(7, None)
    flag = _tuplegetter(8, None)
    sys_flag = _tuplegetter(9, None)
    prepared_transaction_offset = _tuplegetter(10, None)
    size = _tuplegetter(11, None)
    properties_raw = _tuplegetter(12, "the encoded properties section")
    hosts_raw = _tuplegetter(13, "the encoded born and store hosts")

    @property
    def keys(self) -> tuple[str, ...]:
        return _decoded_properties(self.properties_raw)[0]

    @property
    def tags(self) -> str | None:
        return _decoded_properties(self.properties_raw)[1]

    @property
    def properties(self) -> dict[str, str]:
        """User properties (a new dict on each access)."""
        return dict(_decoded_properties(self.properties_raw)[2])

    @property
    def born_host(self) -> Host:
        return _decoded_hosts(self.hosts_raw, self.sys_flag & _HOST_V6_FLAGS)[0]

    @property
    def store_host(self) -> Host:
        return _decoded_hosts(self.hosts_raw, self.sys_flag & _HOST_V6_FLAGS)[1]

    @property
    def msg_id(self) -> str:
        return make_msg_id(self.store_host, self.commitlog_offset)

    def __repr__(self) -> str:
        body = self.body
        return (f"StoredMessage(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
                f"msg_id={self.msg_id}, keys={self.keys!r}, tags={self.tags!r}, "
                f"properties={self.properties!r}, body={body[:32]!r}"
                f"{'...' if len(body) > 32 else ''}, size={self.size})")


_HOST_V6_FLAGS = SYSFLAG_BORN_HOST_V6 | SYSFLAG_STORE_HOST_V6


@lru_cache(maxsize=4096)
def _decoded_properties(raw: bytes) -> tuple[tuple[str, ...], str | None, tuple]:
    keys, tags, props = decode_properties(raw)
    return keys, tags, tuple(props.items())


@lru_cache(maxsize=1024)
def _decoded_hosts(raw: bytes, v6_flags: int) -> tuple[Host, Host]:
    born, p = decode_host(raw, 0, bool(v6_flags & SYSFLAG_BORN_HOST_V6))
    store, _ = decode_host(raw, p, bool(v6_flags & SYSFLAG_STORE_HOST_V6))
    return born, store


class RecordKind:
    """What ``check_record`` found at a position."""

    MESSAGE = 1
    BLANK = 2


def check_record(buf, pos: int, limit: int, *, verify_crc: bool = True) -> tuple[int, int]:
    """Validate the record at ``pos`` within ``buf[:limit]``.

    Returns ``(kind, size)``. Raises CorruptRecordError naming the problem when the bytes
    at ``pos`` are not a whole, intact record (zeroed tail, torn write, bit flip).
    """
    remaining = limit - pos
    if remaining < 8:
        raise CorruptRecordError(f"only {remaining} bytes left, too few for a record", pos)
    total, magic = struct.unpack_from("<II", buf, pos)
    if magic == BLANK_MAGIC:
        if total < BLANK_MIN_SIZE or total > remaining:
            raise CorruptRecordError(f"blank record length {total} is impossible here", pos)
        (trailer,) = U32.unpack_from(buf, pos + total - TRAILER_SIZE)
        if trailer != total:
            raise CorruptRecordError("blank record trailer does not match its length", pos)
        return RecordKind.BLANK, total
    if magic != MESSAGE_MAGIC:
        if total == 0 and magic == 0:
            raise CorruptRecordError("zero bytes where a record should start (end of data)", pos)
        raise CorruptRecordError(f"bad magic 0x{magic:08x}", pos)
    if total < HEADER_SIZE + 12 + TRAILER_SIZE or total > remaining:
        raise CorruptRecordError(f"record length {total} is impossible here "
                                 f"({remaining} bytes remain)", pos)
    (trailer,) = U32.unpack_from(buf, pos + total - TRAILER_SIZE)
    if trailer != total:
        raise CorruptRecordError(f"trailer length {trailer} does not match header length {total}"
                                 " (torn write)", pos)
    sys_flag = I32_AT.unpack_from(buf, pos + POS_SYS_FLAG)[0]
    body_len, topic_len, props_len = struct.unpack_from("<IHH", buf, pos + POS_BODY_LENGTH)
    hosts = (18 if sys_flag & SYSFLAG_BORN_HOST_V6 else 6) + \
        (18 if sys_flag & SYSFLAG_STORE_HOST_V6 else 6)
    if record_size(hosts, topic_len, props_len, body_len) != total:
        raise CorruptRecordError("field lengths do not add up to the record length", pos)
    if verify_crc:
        (stored,) = U32.unpack_from(buf, pos + POS_CRC)
        with memoryview(buf) as mv:
            actual = crc32c(mv[pos + CRC_START:pos + total])
        if actual != stored:
            raise CorruptRecordError(
                f"CRC32C mismatch (stored 0x{stored:08x}, computed 0x{actual:08x})", pos)
    return RecordKind.MESSAGE, total


def decode_topic(raw, pos: int) -> str:
    """The topic name from its bytes ``raw``; CorruptRecordError (naming ``pos``) if they are
    not ASCII, as only a damaged record's can be (``encode_topic`` admits ASCII names only)."""
    try:
        return bytes(raw).decode("ascii")
    except UnicodeDecodeError:
        raise CorruptRecordError(f"topic bytes {bytes(raw)[:40]!r} are not ASCII (a topic "
                                 "name is)", pos) from None


def decode_record(buf, pos: int = 0) -> StoredMessage:
    """The message record at ``pos`` (already validated by ``check_record``); CorruptRecordError
    if its topic cannot be decoded (a flipped bit that a check without the CRC let through)."""
    (total, _magic, _crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, store_ts,
     tx_offset, reconsume, body_len, topic_len, props_len) = HEADER.unpack_from(buf, pos)
    hosts = pos + HEADER_SIZE
    p = hosts + (18 if sys_flag & SYSFLAG_BORN_HOST_V6 else 6) + \
        (18 if sys_flag & SYSFLAG_STORE_HOST_V6 else 6)
    hosts_raw = bytes(buf[hosts:p])
    topic = decode_topic(buf[p:p + topic_len], pos)
    p += topic_len
    props_raw = bytes(buf[p:p + props_len])
    p += props_len
    body = bytes(buf[p:p + body_len])
    return StoredMessage((topic, queue_id, queue_offset, phys, body, born_ts, store_ts,
                          reconsume, flag, sys_flag, tx_offset, total, props_raw, hosts_raw))


def record_damage(buf, pos: int, limit: int, phys: int) -> str | None:
    """Why the bytes at ``pos`` of ``buf[:limit]`` are a damaged message record of commit-log
    offset ``phys``; None if they are that record intact, or not that record at all (another
    offset's intact record, a blank, zeros, the middle of a record, nothing below ``limit``).

    A record start is recognised by its magic or by its own offset field, so a flipped bit in
    either of those still counts as damage to the record, not as "no record here". Checks the
    CRC whatever the caller's setting: this is the slow path, taken after a check failed.
    """
    if limit - pos < POS_PHYSICAL_OFFSET + 8 or pos < 0:
        return None
    total, magic = struct.unpack_from("<II", buf, pos)
    (own,) = I64_AT.unpack_from(buf, pos + POS_PHYSICAL_OFFSET)
    if magic == BLANK_MAGIC or (magic != MESSAGE_MAGIC and
                                (own != phys or (total == 0 and magic == 0))):
        return None
    try:
        check_record(buf, pos, limit, verify_crc=True)
        start, length = topic_span(buf, pos)
        decode_topic(buf[start:start + length], pos)
    except CorruptRecordError as exc:
        return str(exc)
    return None  # intact: this offset's record, or another offset's


def message_at(buf, pos: int, limit: int, phys: int, *,
               verify_crc: bool) -> StoredMessage | None:
    """The message record of commit-log offset ``phys`` at ``pos`` of ``buf[:limit]``.

    None where there is no such record (not a record start, a blank, another offset's record,
    beyond ``limit``); CorruptRecordError naming ``phys`` where that record is but fails its
    checks (CRC with ``verify_crc``, lengths, magic, its own offset, an undecodable topic).
    """
    try:
        kind, _size = check_record(buf, pos, limit, verify_crc=verify_crc)
        if kind == RecordKind.MESSAGE and \
                I64_AT.unpack_from(buf, pos + POS_PHYSICAL_OFFSET)[0] == phys:
            return decode_record(buf, pos)
    except CorruptRecordError:
        pass
    why = record_damage(buf, pos, limit, phys)
    if why is None:
        return None
    raise damaged_record_error(phys, why)


def damaged_record_error(phys: int, why: str) -> CorruptRecordError:
    """The error for a damaged record at commit-log offset ``phys`` (``why``: what failed)."""
    return CorruptRecordError(
        f"the record at commit-log offset {phys} is damaged: {why} (it is never served; "
        "`strata verify DIR` lists every damaged record)", phys)


def peek(buf, pos: int = 0) -> tuple[int, int, int, int, int, int]:
    """(size, queue_id, queue_offset, physical_offset, sys_flag, store_timestamp) at ``pos``."""
    (total, _m, _c, queue_id, _f, queue_offset, phys, sys_flag, _b, store_ts) = \
        PEEK.unpack_from(buf, pos)
    return total, queue_id, queue_offset, phys, sys_flag, store_ts


def topic_span(buf, pos: int) -> tuple[int, int]:
    """(start, length) of the topic bytes of the record at ``pos``; no body decoding."""
    sys_flag = I32_AT.unpack_from(buf, pos + POS_SYS_FLAG)[0]
    (topic_len,) = U16_AT.unpack_from(buf, pos + POS_TOPIC_LENGTH)
    hosts = (18 if sys_flag & SYSFLAG_BORN_HOST_V6 else 6) + \
        (18 if sys_flag & SYSFLAG_STORE_HOST_V6 else 6)
    return pos + HEADER_SIZE + hosts, topic_len


def properties_span(buf, pos: int) -> tuple[int, int]:
    """(start, length) of the properties section of the record at ``pos``."""
    start, topic_len = topic_span(buf, pos)
    (props_len,) = U16_AT.unpack_from(buf, pos + POS_PROPERTIES_LENGTH)
    return start + topic_len, props_len


# --------------------------------------------------------------------------- message ids

_MSGID_V4 = struct.Struct(">4sIq")
_MSGID_V6 = struct.Struct(">16sIq")


_PREFIX_CACHE: dict[Host, str] = {}


def make_msg_id(store_host: Host, commitlog_offset: int) -> str:
    """RocketMQ-style offset message id: hex of store address, port (i32) and offset (i64)."""
    prefix = _PREFIX_CACHE.get(store_host)
    if prefix is None:
        addr = ipaddress.ip_address(store_host[0])
        packer = _MSGID_V6 if addr.version == 6 else _MSGID_V4
        prefix = packer.pack(addr.packed, store_host[1], 0).hex().upper()[:-16]
        if len(_PREFIX_CACHE) < 4096:
            _PREFIX_CACHE[store_host] = prefix
    return f"{prefix}{commitlog_offset & 0xFFFF_FFFF_FFFF_FFFF:016X}"


def msg_id_prefix(store_host: Host) -> str:
    """The constant part (address + port) of every message id of a store host, in hex."""
    return make_msg_id(store_host, 0)[:-16]


def parse_msg_id(msg_id: str) -> tuple[Host, int]:
    """Split a message id into (store host, commit-log offset); InvalidInputError if malformed."""
    if not isinstance(msg_id, str) or len(msg_id) not in (32, 56):
        raise InvalidInputError(f"a message id is 32 or 56 hex characters, got {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise InvalidInputError(f"message id {msg_id!r} is not hexadecimal") from exc
    packer = _MSGID_V6 if len(raw) == 28 else _MSGID_V4
    addr, port, offset = packer.unpack(raw)
    return (str(ipaddress.ip_address(addr)), port), offset
