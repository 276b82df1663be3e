"""Columns of a batch of messages and their encoding into records in one compiled pass.

A ``BytesColumn`` holds n byte strings back to back (one buffer and n + 1 offsets), the shape
Arrow, Kafka record batches and numpy all have. ``encode_records`` turns the columns of a
batch (bodies, keys, tags, pre-encoded properties) into its records laid out back to back, the
way ``record_batch.write_records`` takes them, after checking every limit and every text
column, so bad input is refused — naming the message — before anything is written. The
compiled work is ``column_kernels``' (numba, imported on first use). Pure: no file I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain
from typing import Iterable, Sequence

import numpy as np

from strata.errors import InvalidInputError, MessageTooLargeError, PropertiesTooLargeError
from strata.format import record as rec

# a KEYS or TAGS entry: u16 name length, the name, u16 value length (then the value)
KEY_ENTRY = 2 + len(rec.PROP_KEYS) + 2
TAG_ENTRY = 2 + len(rec.PROP_TAGS) + 2
MAX_TEXT = 0xFFFF   # a key, tag, property name or value: at most this many UTF-8 bytes

_EMPTY_U8 = np.zeros(0, np.uint8)
_NO_ITEMS = np.zeros(1, np.int64)


def kernels():
    """``strata.format.column_kernels``, imported (and numba with it) on first use."""
    from strata.format import column_kernels
    return column_kernels


class BytesColumn:
    """``n`` byte strings stored back to back: item ``i`` is ``data[offsets[i]:offsets[i+1]]``.

    ``data`` is any bytes-like object (bytes, bytearray, memoryview, a uint8 numpy array, an
    Arrow buffer); it is viewed, not copied. ``offsets`` holds ``n + 1`` non-decreasing
    positions in ``data`` (any integer sequence or array; an Arrow binary array's
    ``offsets``). ``BytesColumn.of(items)`` builds one from a sequence of bytes (or str, UTF-8
    encoded; None for an empty item)."""

    __slots__ = ("data", "offsets", "text_checked")

    def __init__(self, data, offsets) -> None:
        try:
            self.data = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) \
                else data.view(np.uint8).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"a BytesColumn's data must be a bytes-like object, got "
                                    f"{type(data).__name__}: {exc}") from None
        try:
            off = np.asarray(offsets)
        except (TypeError, ValueError):
            off = None
        if off is None or off.ndim != 1 or len(off) < 1 or off.dtype.kind not in "iu":
            raise InvalidInputError("a BytesColumn's offsets must be a 1-d integer sequence "
                                    "of n + 1 positions")
        off = off.astype(np.int64, copy=False)
        if int(off[0]) < 0 or int(off[-1]) > len(self.data) or (
                len(off) > 1 and (np.diff(off) < 0).any()):
            raise InvalidInputError(
                f"a BytesColumn's offsets must rise from 0 or more to at most the data's "
                f"length {len(self.data)}")
        self.offsets = np.ascontiguousarray(off)
        self.text_checked = False   # True once its items are known to be well-formed UTF-8

    @classmethod
    def of(cls, items: Iterable[bytes | str | None]) -> "BytesColumn":
        """A column of ``items``: bytes-like as they are, str encoded as UTF-8, None empty."""
        items = items if items.__class__ is list else list(items)
        ascii_col = _ascii_column(items)
        if ascii_col is not None:
            return ascii_col
        kinds = set(map(type, items))
        text = kinds <= {str}
        try:
            if text:
                raw = list(map(str.encode, items))
            elif kinds <= {bytes}:
                raw = items
            else:
                raw = [_item_bytes(v) for v in items]
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"text cannot be encoded as UTF-8: {exc.reason}") from None
        lens = np.fromiter(map(len, raw), np.int64, len(raw))
        off = np.zeros(len(raw) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        col = cls(b"".join(raw), off)
        col.text_checked = text
        return col

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        n = len(self)
        if not -n <= i < n:
            raise IndexError("BytesColumn index out of range")
        i %= n
        return self.data[self.offsets[i]:self.offsets[i + 1]].tobytes()

    def lengths(self) -> np.ndarray:
        """Every item's length (int64)."""
        return np.diff(self.offsets)

    def to_list(self) -> list[bytes]:
        data = self.data.tobytes() if self.data.base is None else bytes(self.data)
        o = self.offsets.tolist()
        return [data[a:b] for a, b in zip(o, o[1:])]

    def __repr__(self) -> str:
        return f"BytesColumn({len(self)} items, {int(self.offsets[-1] - self.offsets[0])} bytes)"


def _ascii_column(items: list) -> "BytesColumn | None":
    """``items`` (all str, all ASCII, no NUL) as a column without a Python step per item:
    joined with NUL separators (TypeError: not all str), encoded once, and the separators'
    positions found and dropped in numpy. None if the items are not like that."""
    if len(items) < 2:
        return None
    try:
        joined = "\x00".join(items)
    except TypeError:
        return None
    if not joined.isascii() or joined.count("\x00") != len(items) - 1:
        return None
    raw = np.frombuffer(joined.encode("ascii"), np.uint8)
    keep = raw != 0
    seps = np.flatnonzero(~keep)
    off = np.empty(len(items) + 1, np.int64)
    off[0] = 0
    off[1:-1] = seps - np.arange(len(seps))
    data = raw[keep]
    off[-1] = len(data)
    col = BytesColumn(data, off)
    col.text_checked = True
    return col


def _item_bytes(v) -> bytes:
    if v is None:
        return b""
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise InvalidInputError(f"column items must be bytes, str or None, got {type(v).__name__}")


def as_column(values, n: int, what: str) -> BytesColumn:
    """``values`` (a BytesColumn or a sequence of bytes / str / None) as a column of ``n``."""
    col = values if isinstance(values, BytesColumn) else BytesColumn.of(values)
    if len(col) != n:
        raise InvalidInputError(f"{what} has {len(col)} items for {n} messages")
    return col


def check_text(col: BytesColumn, what: str) -> None:
    """InvalidInputError naming the first item of ``col`` that is not well-formed UTF-8."""
    if col.text_checked or len(col) == 0:
        return
    data = col.data
    ascii_only = len(data) == 0 or int(data[col.offsets[0]:col.offsets[-1]].max(initial=0)) < 0x80
    if not ascii_only:
        bad = kernels().utf8_bad(data, col.offsets)
        if bad >= 0:
            raise InvalidInputError(f"{what} {bad} is not well-formed UTF-8: {col[bad]!r}")
    col.text_checked = True


def keys_column(keys, n: int) -> tuple[BytesColumn, np.ndarray]:
    """Keys as (a column of all keys, groups): message ``i`` has keys ``groups[i]`` ..
    ``groups[i + 1] - 1``. ``keys`` is a BytesColumn of one key per message (empty: none) or
    a sequence with, per message, None, one key (str or bytes) or a sequence of keys."""
    if isinstance(keys, BytesColumn):
        if len(keys) != n:
            raise InvalidInputError(f"keys has {len(keys)} items for {n} messages")
        return keys, np.arange(n + 1, dtype=np.int64)
    keys = list(keys)
    if len(keys) != n:
        raise InvalidInputError(f"keys has {len(keys)} items for {n} messages")
    kinds = set(map(type, keys))
    if kinds <= {str, bytes, type(None)}:
        return BytesColumn.of(keys), np.arange(n + 1, dtype=np.int64)
    if kinds <= {list, tuple}:   # a sequence of keys per message: flattened at C speed
        flat = list(chain.from_iterable(keys))
        if set(map(type, flat)) <= {str, bytes}:
            groups = np.zeros(n + 1, np.int64)
            np.cumsum(np.fromiter(map(len, keys), np.int64, n), out=groups[1:])
            return BytesColumn.of(flat), groups
    flat: list = []
    counts = np.zeros(n, np.int64)
    for i, k in enumerate(keys):
        if k is None:
            continue
        if isinstance(k, (str, bytes)):
            flat.append(k)
            counts[i] = 1
        elif isinstance(k, (list, tuple)):
            flat.extend(k)
            counts[i] = len(k)
        else:
            raise InvalidInputError(f"keys of message {i} must be a str, bytes or a sequence "
                                    f"of them, got {type(k).__name__}")
    groups = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=groups[1:])
    return BytesColumn.of(flat), groups


def properties_column(properties, n: int) -> BytesColumn:
    """Properties as a column of pre-encoded sections: a BytesColumn (checked here) or a
    sequence of mappings of str to str (or None), encoded as ``Message`` properties are."""
    if isinstance(properties, BytesColumn):
        col = as_column(properties, n, "properties")
        if len(col.data):
            bad, why = kernels().properties_bad(col.data, col.offsets)
            if bad >= 0:
                k = kernels()
                reason = {k.PROPS_TORN: "an entry runs past its end",
                          k.PROPS_EMPTY_NAME: "a property has an empty name",
                          k.PROPS_RESERVED: "a property is named KEYS or TAGS (pass keys=/tags=)",
                          k.PROPS_NOT_UTF8: "a name or value is not well-formed UTF-8"}[why]
                raise InvalidInputError(f"pre-encoded properties of message {bad}: {reason}")
        return col
    props = list(properties)
    if len(props) != n:
        raise InvalidInputError(f"properties has {len(props)} items for {n} messages")
    fast = _dicts_column(props)
    if fast is not None:
        return fast
    encode = rec.encode_properties
    out = []
    for i, p in enumerate(props):
        if p is None or (p.__class__ is dict and not p):
            out.append(b"")
        elif isinstance(p, Mapping):
            out.append(encode(None, None, p))
        else:
            raise InvalidInputError(f"properties of message {i} must be a mapping of str to "
                                    f"str, got {type(p).__name__}")
    col = BytesColumn.of(out)
    col.text_checked = True
    return col


_NO_DICT: dict = {}


def _dicts_column(props: list) -> BytesColumn | None:
    """Dicts of str to str (or None) encoded as property sections column by column: names and
    values flattened and UTF-8 encoded at C speed, the entries laid out in compiled code. None
    if some item is not like that (a name empty, reserved or too long, a value not a str...):
    the caller then encodes message by message, which names the problem."""
    ds = [p or _NO_DICT for p in props]
    try:   # name, value, name, value, ... of all messages in one list
        names = list(chain.from_iterable(ds))
        flat = [None] * (2 * len(names))
        flat[0::2] = names
        flat[1::2] = list(chain.from_iterable(map(dict.values, ds)))   # TypeError: not a dict
        joined = "\x00".join(flat)
    except TypeError:   # not a dict, or not str
        return None
    if joined.isascii() and joined.count("\x00") == len(flat) - 1 and flat:
        n = len(ds)
        groups = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, ds), np.int64, n), out=groups[1:])
        raw = np.frombuffer(joined.encode("ascii"), np.uint8)
        out = np.empty(len(raw) + 1 + 3 * len(flat), np.uint8)   # items + u16 each
        out_off = np.empty(n + 1, np.int64)
        if kernels().encode_joined(raw, groups, out_off, out) >= 0:
            return None
        col = BytesColumn(out, out_off)
        col.text_checked = True
        return col
    try:
        names = list(chain.from_iterable(ds))
        values = list(chain.from_iterable(map(dict.values, ds)))   # TypeError: not a dict
    except TypeError:
        return None
    nc = _ascii_column(names) or _str_column(names)
    vc = _ascii_column(values) or _str_column(values)
    if nc is None or vc is None:
        return None
    if len(names) and (kernels().names_bad(nc.data, nc.offsets) >= 0):
        return None   # an empty or reserved name
    nlen, vlen = nc.lengths(), vc.lengths()
    if len(names) and max(int(nlen.max()), int(vlen.max())) > MAX_TEXT:
        return None
    n = len(ds)
    groups = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, ds), np.int64, n), out=groups[1:])
    entry = np.zeros(len(names) + 1, np.int64)
    np.cumsum(nlen + vlen + 4, out=entry[1:])
    out_off = entry[groups]
    out = np.empty(int(out_off[-1]), np.uint8)
    if len(names):
        kernels().encode_entries(nc.data, nc.offsets, vc.data, vc.offsets, groups, out_off, out)
    col = BytesColumn(out, out_off)
    col.text_checked = True
    return col


def _str_column(items: list) -> "BytesColumn | None":
    """``BytesColumn.of(items)`` if all are str (None otherwise, or if one is not UTF-8)."""
    if not set(map(type, items)) <= {str}:
        return None
    try:
        return BytesColumn.of(items)
    except InvalidInputError:
        return None


class EncodedRecords:
    """A batch's records back to back (``blob``: headers and trailers zero) with each record's
    length (``totals``), body length and properties length (int64 arrays)."""

    __slots__ = ("blob", "totals", "body_lens", "props_lens")

    def __init__(self, blob: np.ndarray, totals: np.ndarray, body_lens: np.ndarray,
                 props_lens: np.ndarray) -> None:
        self.blob, self.totals, self.body_lens, self.props_lens = (
            blob, totals, body_lens, props_lens)


def encode_records(prefix: bytes | list[bytes], bodies: BytesColumn, *,
                   prefix_of: np.ndarray | None = None, keys: BytesColumn | None = None,
                   key_groups: np.ndarray | None = None, tags: BytesColumn | None = None,
                   properties: BytesColumn | None = None, max_body: int,
                   max_record: int) -> EncodedRecords:
    """The records of ``len(bodies)`` messages: ``prefix`` (the fixed header's zeros, born and
    store host, topic: one for all, or a list of them and ``prefix_of``, which one each
    message's record starts with), properties (a KEYS entry per non-empty key, a TAGS
    entry for a non-empty tag, the pre-encoded properties), body, a zero trailer.

    Checks (InvalidInputError / MessageTooLargeError naming the message) every length limit
    and that keys and tags are well-formed UTF-8; ``properties`` must already be checked
    (``properties_column``)."""
    n = len(bodies)
    body_lens = bodies.lengths()
    if n and int(body_lens.max()) > max_body:
        i = int(np.argmax(body_lens))
        raise MessageTooLargeError(f"message {i}: body of {int(body_lens[i])} bytes exceeds "
                                   f"max_body_size {max_body}")
    props_lens = np.zeros(n, np.int64)
    if keys is not None and len(keys):
        check_text(keys, "key")
        klen = keys.lengths()
        if int(klen.max()) > MAX_TEXT:
            raise MessageTooLargeError("a message key is longer than 65535 encoded bytes")
        cost = np.where(klen > 0, klen + KEY_ENTRY, 0)
        csum = np.zeros(len(cost) + 1, np.int64)
        np.cumsum(cost, out=csum[1:])
        props_lens += csum[key_groups[1:]] - csum[key_groups[:-1]]
        key_data, key_off = keys.data, keys.offsets
    else:
        key_data, key_off = _EMPTY_U8, _NO_ITEMS
        key_groups = np.zeros(n + 1, np.int64)
    if tags is not None:
        check_text(tags, "tag")
        tlen = tags.lengths()
        if n and int(tlen.max()) > MAX_TEXT:
            raise MessageTooLargeError("tags are longer than 65535 encoded bytes")
        props_lens += np.where(tlen > 0, tlen + TAG_ENTRY, 0)
        tag_data, tag_off = tags.data, tags.offsets
    else:
        tag_data, tag_off = _EMPTY_U8, _NO_ITEMS
    if properties is not None:
        props_lens += properties.lengths()
        prop_data, prop_off = properties.data, properties.offsets
    else:
        prop_data, prop_off = _EMPTY_U8, _NO_ITEMS
    if n and int(props_lens.max()) > rec.MAX_PROPERTIES_BYTES:
        i = int(np.argmax(props_lens))
        raise PropertiesTooLargeError(
            f"message {i}: properties take {int(props_lens[i])} encoded bytes; the limit is "
            f"{rec.MAX_PROPERTIES_BYTES}")
    if isinstance(prefix, bytes):
        prefixes = BytesColumn(prefix, [0, len(prefix)])
        prefix_of = np.zeros(n, np.int64)
        prefix_lens = len(prefix)
    else:
        prefixes = BytesColumn.of(prefix)
        prefix_lens = prefixes.lengths()[prefix_of]
    totals = body_lens + props_lens + prefix_lens + rec.TRAILER_SIZE
    if n and int(totals.max()) > max_record:
        i = int(np.argmax(totals))
        raise MessageTooLargeError(f"message {i}: its record of {int(totals[i])} bytes cannot "
                                   f"fit a segment")
    out = np.empty(int(totals.sum()), np.uint8)
    made = np.empty(n, np.int64)
    kernels().build_records(prefixes.data, prefixes.offsets, prefix_of, bodies.data,
                            bodies.offsets,
                            key_data, key_off, key_groups, tag_data, tag_off, prop_data,
                            prop_off, made, out)
    assert (made == totals).all()
    return EncodedRecords(out, totals, body_lens, props_lens)


def born_column(born_timestamps, n: int) -> np.ndarray | int:
    """Born timestamps (ms) as an int64 array of ``n`` (None: 0, the default), or 0 for all."""
    if born_timestamps is None:
        return 0
    try:
        born = np.asarray(born_timestamps if not isinstance(born_timestamps, Sequence) or
                          None not in born_timestamps else
                          [0 if t is None else t for t in born_timestamps])
    except (TypeError, ValueError):
        born = None
    if born is None or born.ndim != 1 or (len(born) and born.dtype.kind not in "iu"):
        raise InvalidInputError("born_timestamps must be a sequence of int milliseconds")
    if len(born) != n:
        raise InvalidInputError(f"born_timestamps has {len(born)} items for {n} messages")
    if len(born) and (int(born.min()) < 0 or int(born.max()) > 2 ** 63 - 1):
        raise InvalidInputError("born_timestamps must be milliseconds in 0..2**63-1")
    return born.astype(np.int64, copy=False)
