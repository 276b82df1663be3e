"""The properties section of a commit-log record: encode, decode, find one, and the dispatch
path's one-pass read of keys, tags and unique key.

Entries are ``u16 name length, name, u16 value length, value`` (UTF-8, little-endian); the
message keys and tags are ordinary entries named ``KEYS`` and ``TAGS``. ``strata.format.record``
places the section in a record and re-exports these names. See docs/format.md.

Pure functions only: no file I/O, no threads.
"""

from __future__ import annotations

import struct
from typing import Iterable, Mapping

from strata.errors import (CorruptRecordError, InvalidInputError, MessageTooLargeError,
                           PropertiesTooLargeError)

MAX_PROPERTIES_BYTES = 32767

PROP_KEYS = "KEYS"
PROP_TAGS = "TAGS"
PROP_UNIQ_KEY = "UNIQ_KEY"
RESERVED_PROPERTIES = frozenset({PROP_KEYS, PROP_TAGS})

_ENTRY_LEN = struct.Struct("<H")


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} {text!r} cannot be encoded as UTF-8: {exc.reason}") from None


def _entry_header(name: str) -> bytes:
    nb = name.encode("utf-8")
    return _ENTRY_LEN.pack(len(nb)) + nb


_KEYS_HEADER = _entry_header(PROP_KEYS)
_TAGS_HEADER = _entry_header(PROP_TAGS)


def _reserved_entry(header: bytes, text: str, label: str, too_long: str) -> bytes:
    """The entry of a key or the tags: ``header`` (its reserved name), then ``text``."""
    b = _utf8(text, label)
    if len(b) > 0xFFFF:
        raise MessageTooLargeError(too_long)
    return header + _ENTRY_LEN.pack(len(b)) + b


def encode_properties(keys: Iterable[str], tags: str | None,
                      properties: Mapping[str, str] | None) -> bytes:
    """Encode keys, tags and user properties into the properties section."""
    parts: list[bytes] = []
    add = parts.append
    pack = _ENTRY_LEN.pack
    if keys is None:
        keys = ()
    elif keys.__class__ is not tuple and keys.__class__ is not list and (
            isinstance(keys, (bytes, bytearray, memoryview)) or not isinstance(keys, Iterable)):
        raise InvalidInputError(f"message keys must be a sequence of strings, got {keys!r}")
    if properties is not None and properties.__class__ is not dict and \
            not isinstance(properties, Mapping):
        raise InvalidInputError(
            f"properties must be a mapping of str to str, got {type(properties).__name__}")
    for k in keys:
        if not isinstance(k, str) or not k:
            raise InvalidInputError(f"message keys must be non-empty strings, got {k!r}")
        add(_reserved_entry(_KEYS_HEADER, k, "message key",
                            "a message key is longer than 65535 encoded bytes"))
    if tags is not None:
        if not isinstance(tags, str) or not tags:
            raise InvalidInputError(f"tags must be a non-empty string, got {tags!r}")
        add(_reserved_entry(_TAGS_HEADER, tags, "tags",
                            "tags are longer than 65535 encoded bytes"))
    if properties:
        for name, value in properties.items():
            if not isinstance(name, str) or not name:
                raise InvalidInputError(f"property names must be non-empty strings, got {name!r}")
            if name in RESERVED_PROPERTIES:
                raise InvalidInputError(
                    f"property name {name!r} is reserved; pass keys=/tags= instead")
            if not isinstance(value, str):
                raise InvalidInputError(
                    f"property {name!r} must be a str, got {type(value).__name__}")
            nb = _utf8(name, "property name")
            vb = _utf8(value, f"property {name!r} value")
            if len(nb) > 0xFFFF or len(vb) > 0xFFFF:
                raise PropertiesTooLargeError(
                    f"property {name!r} is longer than 65535 encoded bytes")
            add(pack(len(nb)))
            add(nb)
            add(pack(len(vb)))
            add(vb)
    out = b"".join(parts)
    if len(out) > MAX_PROPERTIES_BYTES:
        raise PropertiesTooLargeError(
            f"properties take {len(out)} encoded bytes; the limit is {MAX_PROPERTIES_BYTES}")
    return out


def decode_properties(buf) -> tuple[tuple[str, ...], str | None, dict[str, str]]:
    """Decode a properties section into (keys, tags, user properties); CorruptRecordError if
    it is damaged (an entry overruns the section, or text is not UTF-8)."""
    try:
        return _decode_properties(bytes(buf))
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"properties section is damaged: {exc}") from None


def _decode_properties(raw: bytes) -> tuple[tuple[str, ...], str | None, dict[str, str]]:
    keys: list[str] = []
    tags: str | None = None
    props: dict[str, str] = {}
    pos, end = 0, len(raw)
    unpack = _ENTRY_LEN.unpack_from
    while pos < end:
        (nl,) = unpack(raw, pos)
        name = raw[pos + 2:pos + 2 + nl].decode("utf-8")
        pos += 2 + nl
        (vl,) = unpack(raw, pos)
        value = raw[pos + 2:pos + 2 + vl].decode("utf-8")
        pos += 2 + vl
        if name == PROP_KEYS:
            keys.append(value)
        elif name == PROP_TAGS:
            tags = value
        else:
            props[name] = value
    if pos != end:
        raise CorruptRecordError("properties section overruns its length")
    return tuple(keys), tags, props


def find_property(buf, wanted: str) -> list[str]:
    """Every value of property ``wanted`` (e.g. KEYS) without decoding the others."""
    target = wanted.encode("utf-8")
    found: list[str] = []
    pos, end = 0, len(buf)
    while pos < end:
        (nl,) = _ENTRY_LEN.unpack_from(buf, pos)
        name = buf[pos + 2:pos + 2 + nl]
        pos += 2 + nl
        (vl,) = _ENTRY_LEN.unpack_from(buf, pos)
        if name == target:
            found.append(bytes(buf[pos + 2:pos + 2 + vl]).decode("utf-8"))
        pos += 2 + vl
    return found

_KEYS_B = PROP_KEYS.encode()
_TAGS_B = PROP_TAGS.encode()
_UNIQ_B = PROP_UNIQ_KEY.encode()


def dispatch_properties(buf) -> tuple[list[str], str | None, str | None]:
    """(keys, tags, unique key) from a properties section in one pass (dispatch path)."""
    if buf[:6] == _KEYS_HEADER:  # the common shape: one key and nothing else
        vl = buf[6] | buf[7] << 8
        if 8 + vl == len(buf):
            return [bytes(buf[8:]).decode("utf-8")], None, None
    keys: list[str] = []
    tags = uniq = None
    pos, end = 0, len(buf)
    unpack = _ENTRY_LEN.unpack_from
    while pos < end:
        (nl,) = unpack(buf, pos)
        name = bytes(buf[pos + 2:pos + 2 + nl])
        pos += 2 + nl
        (vl,) = unpack(buf, pos)
        if name == _KEYS_B:
            keys.append(bytes(buf[pos + 2:pos + 2 + vl]).decode("utf-8"))
        elif name == _TAGS_B:
            tags = bytes(buf[pos + 2:pos + 2 + vl]).decode("utf-8")
        elif name == _UNIQ_B:
            uniq = bytes(buf[pos + 2:pos + 2 + vl]).decode("utf-8")
        pos += 2 + vl
    return keys, tags, uniq
