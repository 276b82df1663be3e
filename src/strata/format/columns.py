"""Columns of a batch of messages and their encoding into records in one compiled pass.

A ``BytesColumn`` holds n byte strings back to back (one buffer and n + 1 offsets), the shape
Arrow, Kafka record batches and numpy all have. ``encode_records`` turns the columns of a
batch (bodies, keys, tags, pre-encoded properties) into its records laid out back to back, the
way ``record_batch.seal_records`` takes them, after checking every limit and every text
column, so bad input is refused — naming the message — before anything is written
(``strata.format.record_encoding``). The
compiled work is ``column_kernels``' (numba, imported on first use). Pure: no file I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain, repeat
from operator import is_not
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from strata.errors import InvalidInputError
from strata.format import record as rec

# a KEYS or TAGS entry: u16 name length, the name, u16 value length (then the value)
KEY_ENTRY = 2 + len(rec.PROP_KEYS) + 2
TAG_ENTRY = 2 + len(rec.PROP_TAGS) + 2
MAX_TEXT = 0xFFFF   # a key, tag, property name or value: at most this many UTF-8 bytes
# In a born-timestamp column: not given, born at the put (the batch's store timestamp). A given
# born timestamp is >= 0.
BORN_AT_PUT = -1

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
    def trusted(cls, data: np.ndarray, offsets: np.ndarray) -> "BytesColumn":
        """A column over ``data`` (uint8) and ``offsets`` (int64, contiguous) that this
        package made and knows to be consistent, its text well-formed UTF-8: nothing checked
        or converted."""
        col = cls.__new__(cls)
        col.data, col.offsets, col.text_checked = data, offsets, True
        return col

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
_KEY_CONTAINERS = {tuple, list}
_SHARD_KINDS = {str, int, type(None)}


class MessageText(NamedTuple):
    """The text fields of a batch of messages as columns (``message_text``); None: no message
    has that field."""

    keys: BytesColumn | None          # every key, in message order
    key_groups: np.ndarray | None     # message i has keys key_groups[i] .. key_groups[i+1]-1
    tags: BytesColumn | None          # one per message (empty: none)
    properties: BytesColumn | None    # one encoded section per message (empty: none)
    shard_keys: BytesColumn | None    # one per message, as str(shard_key) in UTF-8
    has_shard: np.ndarray | None      # which messages have a shard key (None: all)


def message_text(keys: Sequence, tags: Sequence, properties: Sequence,
                 shard_keys: Sequence) -> MessageText | None:
    """The keys, tags, properties and shard keys of n messages (one item per message each, as
    ``Message`` holds them: a list/tuple of key str, a tag str or None, a dict of str to str or
    None, a shard key or None) as columns, all text UTF-8 encoded in one join and split in one
    compiled pass: a handful of C-speed passes over the Python objects, none per message in
    Python. None when some value is not of the usual kind (an empty key or tag, a name that is
    empty, reserved or too long, a value not a str, a NUL inside a text...): the
    message-by-message path then names the problem."""
    n = len(keys)
    if not set(map(type, keys)) <= _KEY_CONTAINERS:
        return None
    parts: list = []
    key_groups = _groups(keys, n)
    n_keys = int(key_groups[-1])
    if n_keys:
        parts.append(chain.from_iterable(keys))
    no_tag = tags.count(None)
    n_tags = 0 if no_tag == n else n
    if n_tags:
        if no_tag:
            if "" in tags:
                return None
            tags = ["" if t is None else t for t in tags]
        parts.append(tags)
    no_props = properties.count(None)
    prop_groups = None
    n_props = 0
    if no_props != n:
        ds = properties if not no_props else [p or _NO_DICT for p in properties]
        try:
            prop_groups = _groups(ds, n)
        except TypeError:   # not a mapping
            return None
        n_props = int(prop_groups[-1])
        if n_props:   # names, then values (dict.values: TypeError for a non-dict)
            parts += [chain.from_iterable(ds), chain.from_iterable(map(dict.values, ds))]
    no_shard = shard_keys.count(None)
    n_shards = 0 if no_shard == n else n
    has_shard = None
    if n_shards:
        kinds = set(map(type, shard_keys))
        if no_shard or kinds != {str}:
            if not kinds <= _SHARD_KINDS:
                return None
            has_shard = np.fromiter(map(is_not, shard_keys, repeat(None)), bool, n)
            shard_keys = ["" if k is None else str(k) for k in shard_keys]
        parts.append(shard_keys)
    split = _joined_items(parts, n_keys + n_tags + 2 * n_props + n_shards)
    if split is None:
        return None
    data, off = split
    at = 0
    key_col = tag_col = prop_col = shard_col = None
    if n_keys:
        key_col = BytesColumn.trusted(data, off[:n_keys + 1])
        if not key_col.lengths().all():
            return None   # an empty key
        at = n_keys
    if n_tags:
        tag_col = BytesColumn.trusted(data, off[at:at + n + 1])
        if not no_tag and not tag_col.lengths().all():
            return None   # an empty tag
        at += n
    if n_props:
        prop_col = _entries_column(data, off[at:at + n_props + 1],
                                   off[at + n_props:at + 2 * n_props + 1], prop_groups)
        if prop_col is None:
            return None
        at += 2 * n_props
    if n_shards:
        shard_col = BytesColumn.trusted(data, off[at:at + n + 1])
    return MessageText(key_col, key_groups if n_keys else None, tag_col, prop_col, shard_col,
                       has_shard)


def _groups(items: Sequence, n: int) -> np.ndarray:
    """n + 1 offsets: item i's entries are groups[i] .. groups[i + 1] - 1 (len of each)."""
    groups = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, items), np.int64, n), out=groups[1:])
    return groups


def _joined_items(parts: list, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``count`` str items of the iterables ``parts`` UTF-8 encoded into one buffer:
    (data, offsets of count + 1), item j at data[off[j]:off[j + 1]]. One str.join (TypeError:
    an item is not a str), one encode, one compiled split at the NUL separators. None if an
    item is not a str, holds a NUL or cannot be encoded (a lone surrogate)."""
    if count == 0:
        return _EMPTY_U8, np.zeros(1, np.int64)
    try:
        joined = "\x00".join(chain(*parts))
        raw = joined.encode()
    except (TypeError, UnicodeEncodeError):
        return None
    if joined.count("\x00") != count - 1:
        return None   # a NUL inside an item
    data = np.empty(len(raw) - count + 1, np.uint8)
    off = np.empty(count + 1, np.int64)
    kernels().split_joined(np.frombuffer(raw, np.uint8), data, off)
    return data, off


def _entries_column(data: np.ndarray, name_off: np.ndarray, value_off: np.ndarray,
                    groups: np.ndarray) -> BytesColumn | None:
    """Property sections from names and values (items of ``data``): message i's section holds
    entries groups[i] .. groups[i + 1] - 1. None if a name is empty or reserved, or a name or
    value too long."""
    nlen, vlen = np.diff(name_off), np.diff(value_off)
    if len(nlen) and (max(int(nlen.max()), int(vlen.max())) > MAX_TEXT or
                      kernels().names_bad(data, name_off) >= 0):
        return None
    entry = np.zeros(len(nlen) + 1, np.int64)
    np.cumsum(nlen + vlen + 4, out=entry[1:])
    out_off = entry[groups]
    out = np.empty(int(out_off[-1]), np.uint8)
    if len(nlen):
        kernels().encode_entries(data, name_off, data, value_off, groups, out_off, out)
    return BytesColumn.trusted(out, out_off)


def _dicts_column(props: list) -> BytesColumn | None:
    """Dicts of str to str (or None) encoded as property sections column by column (names and
    values joined and encoded at C speed, the entries laid out in compiled code). None if some
    item is not like that (a name empty, reserved or too long, a value not a str...): the
    caller then encodes message by message, which names the problem."""
    n = len(props)
    ds = [p or _NO_DICT for p in props]
    try:
        groups = _groups(ds, n)
    except TypeError:   # not a mapping
        return None
    count = int(groups[-1])
    split = _joined_items([chain.from_iterable(ds), chain.from_iterable(map(dict.values, ds))],
                          2 * count)
    if split is None:
        return None
    data, off = split
    return _entries_column(data, off[:count + 1], off[count:], groups)


def born_column(born_timestamps, n: int) -> np.ndarray | None:
    """Born timestamps (ms) as an int64 array of ``n``, BORN_AT_PUT for an item that is None
    (born at the put: the writer puts the batch's store timestamp there); None when
    ``born_timestamps`` is None (every message born at the put). An explicit 0 stays 0."""
    if born_timestamps is None:
        return None
    some_none = isinstance(born_timestamps, Sequence) and None in born_timestamps
    try:
        born = np.asarray(born_timestamps if not some_none else
                          [0 if t is None else t for t in born_timestamps])
    except (TypeError, ValueError):
        born = None
    if born is None or born.ndim != 1 or (len(born) and born.dtype.kind not in "iu"):
        raise InvalidInputError("born_timestamps must be a sequence of int milliseconds")
    if len(born) != n:
        raise InvalidInputError(f"born_timestamps has {len(born)} items for {n} messages")
    if len(born) and (int(born.min()) < 0 or int(born.max()) > 2 ** 63 - 1):
        raise InvalidInputError("born_timestamps must be milliseconds in 0..2**63-1")
    born = born.astype(np.int64, copy=False)
    if some_none:
        born[np.fromiter((t is None for t in born_timestamps), bool, n)] = BORN_AT_PUT
    return born


def load_kernels() -> None:
    """Load the compiled column encoders now: numba's cached code costs a process most of a
    second on first use, which otherwise falls in the first ``put_batch`` of messages with
    keys, tags, properties or shard keys (or the first ``put_columns``). A program that wants
    that first put at full speed (``strata demo`` before its clock) calls this first; the
    store does not, so that programs putting plain messages only never pay it."""
    text = message_text([("k",), ["k"]], ("t", None), ({"n": "v"}, None), ("s", 1))
    bodies = BytesColumn.trusted(np.zeros(2, np.uint8), np.arange(3, dtype=np.int64))
    from strata.format.record_encoding import encode_records
    encode_records([b"p", b"q"], bodies, prefix_of=np.zeros(2, np.int64), keys=text.keys,
                   key_groups=text.key_groups, tags=text.tags, properties=text.properties,
                   max_body=8, max_record=64)
    one, two = np.zeros(1, np.int64), np.zeros(2, np.int64)
    kernels().choose_queues(two, text.shard_keys.data, text.shard_keys.offsets,
                            text.has_shard, one + 8, one, one.copy(), two, np.zeros(8, np.int64),
                            two.copy(), two.copy())
    properties_column(BytesColumn.of([b"", b""]), 2)
    check_text(BytesColumn(b"\xc3\xa9", [0, 2]), "key")
    from strata.format import object_gather   # the walk over Message objects

    class Probe:   # laid out as strata.Message
        __slots__ = ("topic", "body", "_ext")
    m = Probe()
    m.topic, m.body, m._ext = "t", b"b", (["k"], "t", {"n": "v"}, None, "s", 5, 0, None, 0, 0, 0)
    object_gather.walk([m, m], Probe, 8)
    from strata.format import column_walk   # put_columns' Python lists
    column_walk.walk_lists([["k"], "k"], ["t", None], [{"n": "v"}, None], 2)
