"""A batch of ``Message``s read into columns by ONE compiled walk over the Python objects
(numba reading CPython's object layout): what ``columns.message_text`` gathers (keys, tags,
properties, shard keys), the born timestamps, the bodies and the topics.

Why: a rich message is about a dozen small objects (the Message, its field tuple, keys list,
key strings, properties dict, names, values, shard key, born int, body). Gathering them with
C-speed Python passes (``zip``, ``count``, ``str.join`` over chained iterators) walks those
objects several times, and on a batch of 1,024 each walk pays the cache misses again; here
each object is read once. ASCII text (the usual case) is copied straight from each str's
inline bytes, properties are written as the record's entries, a dict is walked with
``PyDict_Next``.

Anything unusual — a non-ASCII or NUL-holding text, an empty key, tag or property name, a
reserved or too long name, a container or value of another type, routing, flags, a born host,
a body not bytes or too large — makes ``walk`` return None, and the caller takes its general
path (``columns.message_text``), which handles or names it. The layout facts it relies on
(CPython 3.11's list, tuple, bytes, compact-ASCII str and int objects; the Message's slots,
read from its descriptors) are checked by a probe at import and on the first message of the
class; if a check fails, ``walk`` always returns None.

The kernels hold the GIL (they read live objects, which the caller's list keeps alive). The
text goes into per-thread scratch buffers grown when a batch does not fit, so those columns
are views valid until the same thread's next call. Pure: no file I/O.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from strata.format.columns import BORN_AT_PUT
from strata.format.record_kernels import load_i64 as _i64, load_u8 as _u8, \
    load_u32 as _u32, memcpy
# a bytes object's inline data, as record_objects lays it out (and checks at its import)
from strata.format.record_objects import BYTES_DATA_AT as _BYTES_AT
from strata.format.record_objects import LIST_ITEMS_AT, VAR_SIZE_AT

_I64 = ir.IntType(64)
_OBJ = ir.IntType(8).as_pointer()

# CPython 3.11 object layout (checked by _probe): the size field of a list, tuple, str and int,
# a list's item pointer, a tuple's inline items, a str's state bits and inline ASCII data, an
# int's 30-bit digits.
_SIZE_AT = VAR_SIZE_AT   # (record_objects' names for the shared ones)
_ITEMS_AT = LIST_ITEMS_AT  # a list's item pointer; a tuple's inline items start there too
_STATE_AT = 32
_ASCII_AT = 48
_COMPACT_ASCII = 0x60   # state bits: compact (0x20) and ascii (0x40)
_DIGITS_AT = 24
_EXT_LEN = 11           # Message._ext: keys, tags, properties, queue_id, shard_key, born, ...

# result codes
OK, UNUSUAL, FULL = 0, 1, 2
# info[]: what the batch had
I_KEYS, I_TAGS, I_PROP_MSGS, I_PROPS, I_SHARDS, I_BORN, I_TOPICS = range(7)
MAX_TOPICS = 64   # distinct topic objects a walk numbers


@intrinsic
def _dict_next(typingctx, d, ppos, pkey, pvalue):
    """``PyDict_Next(d, ppos, pkey, pvalue)`` (addresses; the key and value are borrowed)."""
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [_OBJ] * 4)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "PyDict_Next")
        return builder.sext(builder.call(fn, [builder.inttoptr(a, _OBJ) for a in args]), _I64)
    return types.int64(types.int64, types.int64, types.int64, types.int64), codegen


@njit(cache=True, inline="always")
def _text(s, str_type, data, at, least):
    """Copy str ``s`` (compact ASCII, no NUL, at least ``least`` characters) into ``data``
    from ``at``; returns the end, -UNUSUAL if ``s`` is not like that, -FULL if ``data`` is
    full."""
    if _i64(s + 8) != str_type or (_u32(s + _STATE_AT) & _COMPACT_ASCII) != _COMPACT_ASCII:
        return -UNUSUAL
    n = _i64(s + _SIZE_AT)
    if n < least:
        return -UNUSUAL
    if at + n > len(data):
        return -FULL
    src = s + _ASCII_AT
    for j in range(n):
        c = _u8(src + j)
        if c == 0:
            return -UNUSUAL
        data[at + j] = c
    return at + n


@njit(cache=True, inline="always")
def _same_text(a, b, str_type):
    """Are ``a`` and ``b`` the same object, or compact ASCII strs of equal text?"""
    if a == b:
        return True
    if _i64(a + 8) != str_type or _i64(b + 8) != str_type or \
            (_u32(a + _STATE_AT) & _u32(b + _STATE_AT) & _COMPACT_ASCII) != _COMPACT_ASCII:
        return False
    n = _i64(a + _SIZE_AT)
    if _i64(b + _SIZE_AT) != n:
        return False
    for j in range(n):
        if _u8(a + _ASCII_AT + j) != _u8(b + _ASCII_AT + j):
            return False
    return True


@njit(cache=True, inline="always")
def _entry(s, str_t, data, at, least):
    """A property entry's half: u16 little-endian length, then str ``s``'s bytes (as
    ``_text``), into ``data`` from ``at``; returns the end, -UNUSUAL (also: longer than
    65535), -FULL."""
    if at + 2 > len(data):
        return -FULL
    end = _text(s, str_t, data, at + 2, least)
    if end < 0:
        return end
    n = end - at - 2
    if n > 0xFFFF:
        return -UNUSUAL
    data[at] = n & 0xFF
    data[at + 1] = n >> 8
    return end


@njit(cache=True, inline="always")
def _reserved(data, at, end):
    """Is ``data[at:end]`` KEYS or TAGS (names a property may not have)?"""
    if end - at != 4:
        return False
    return (data[at] == 75 and data[at + 1] == 69 and data[at + 2] == 89 and
            data[at + 3] == 83) or (data[at] == 84 and data[at + 1] == 65 and
                                    data[at + 2] == 71 and data[at + 3] == 83)


@njit(cache=True)
def gather(msgs, n, kinds, slots, max_body, pos, topics, topic_codes, body_at, body_len,
           key_data, key_off, key_groups, tag_data, tag_off, prop_data, prop_off, shard_data,
           shard_off, has_shard, born, info):
    """Walk the ``n`` Messages of the list at address ``msgs`` and fill the columns (see
    ``walk``): each message's topic numbered (same object or equal ASCII text: one number;
    ``topic_codes``; ``topics`` gets the
    first message of each, up to its length: past that info[I_TOPICS] is 0 and the codes
    are not filled), each body's address and length (bytes objects of at most
    ``max_body``), and the fields of its ``_ext`` (None or the 11-tuple). ``kinds``: addresses of None, the
    int 0, and the types str, tuple, list, dict, int, bytes, Message; ``slots``: where a
    Message keeps its topic, body and _ext. ``pos``: 3 int64 for PyDict_Next (position,
    key, value).
    Returns OK, UNUSUAL (take the general path) or FULL (a buffer is too small)."""
    none, zero, str_t, tuple_t, list_t, dict_t, int_t = (kinds[0], kinds[1], kinds[2],
                                                         kinds[3], kinds[4], kinds[5], kinds[6])
    bytes_t, msg_t = kinds[7], kinds[8]
    pos_at = pos.ctypes.data
    topic_at, body_slot, ext_at = slots[0], slots[1], slots[2]
    items = _i64(msgs + _ITEMS_AT)
    n_topics = 0
    last_topic = last_code = -1
    nk = np_ = 0
    kb = tb = pb = sb = 0
    tags = prop_msgs = shards = borns = 0
    key_off[0] = tag_off[0] = prop_off[0] = shard_off[0] = key_groups[0] = 0
    for i in range(n):
        m = _i64(items + 8 * i)
        if _i64(m + 8) != msg_t:
            return UNUSUAL
        t = _i64(m + topic_at)
        if t != last_topic and n_topics >= 0:
            last_code = -1
            for k in range(n_topics):
                if _same_text(_i64(_i64(items + 8 * topics[k]) + topic_at), t, str_t):
                    last_code = k
                    break
            if last_code < 0:
                if n_topics == len(topics):
                    n_topics = -1   # too many: the caller numbers them
                else:
                    topics[n_topics] = i
                    last_code = n_topics
                    n_topics += 1
            last_topic = t
        if n_topics >= 0:
            topic_codes[i] = last_code
        body = _i64(m + body_slot)
        if _i64(body + 8) != bytes_t or _i64(body + _SIZE_AT) > max_body:
            return UNUSUAL
        body_at[i] = body + _BYTES_AT
        body_len[i] = _i64(body + _SIZE_AT)
        e = _i64(m + ext_at)
        if e == none:
            key_groups[i + 1] = nk
            tag_off[i + 1] = tb
            prop_off[i + 1] = pb
            shard_off[i + 1] = sb
            has_shard[i] = False
            born[i] = BORN_AT_PUT
            continue
        if _i64(e + 8) != tuple_t or _i64(e + _SIZE_AT) != _EXT_LEN:
            return UNUSUAL
        f = e + _ITEMS_AT
        # routing, flags, born host: defaults only (queue_id, flag, born_host, reconsume,
        # sys_flag, prepared transaction offset)
        if _i64(f + 24) != none or _i64(f + 48) != zero or _i64(f + 56) != none or \
                _i64(f + 64) != zero or _i64(f + 72) != zero or _i64(f + 80) != zero:
            return UNUSUAL
        keys = _i64(f)
        kt = _i64(keys + 8)
        if kt == tuple_t:
            karr = keys + _ITEMS_AT
        elif kt == list_t:
            karr = _i64(keys + _ITEMS_AT)
        else:
            return UNUSUAL
        for j in range(_i64(keys + _SIZE_AT)):
            if nk + 1 >= len(key_off):
                return FULL
            end = _text(_i64(karr + 8 * j), str_t, key_data, kb, 1)   # a key is not empty
            if end < 0:
                return -end
            kb = end
            nk += 1
            key_off[nk] = kb
        key_groups[i + 1] = nk
        tag = _i64(f + 8)
        if tag != none:
            end = _text(tag, str_t, tag_data, tb, 1)
            if end < 0:
                return -end
            tb = end
            tags += 1
        tag_off[i + 1] = tb
        props = _i64(f + 16)
        if props != none:
            if _i64(props + 8) != dict_t:
                return UNUSUAL
            prop_msgs += 1
            pos[0] = 0
            while _dict_next(props, pos_at, pos_at + 8, pos_at + 16):
                end = _entry(_i64(pos_at + 8), str_t, prop_data, pb, 1)   # a name: not empty
                if end < 0:
                    return -end
                if _reserved(prop_data, pb + 2, end):
                    return UNUSUAL
                end = _entry(_i64(pos_at + 16), str_t, prop_data, end, 0)
                if end < 0:
                    return -end
                pb = end
                np_ += 1
        prop_off[i + 1] = pb
        shard = _i64(f + 32)
        if shard != none:
            end = _text(shard, str_t, shard_data, sb, 0)
            if end < 0:
                return -end
            sb = end
            shards += 1
            has_shard[i] = True
        else:
            has_shard[i] = False
        shard_off[i + 1] = sb
        b = _i64(f + 40)
        if b == none:
            born[i] = BORN_AT_PUT
        else:
            if _i64(b + 8) != int_t:
                return UNUSUAL
            size = _i64(b + _SIZE_AT)
            if size < 0 or size > 3:
                return UNUSUAL
            v = 0
            for d in range(size):
                digit = _u32(b + _DIGITS_AT + 4 * d)
                if d == 2 and digit >= 8:
                    return UNUSUAL   # past 2**63 - 1
                v |= digit << (30 * d)
            born[i] = v
            borns += 1
    info[I_KEYS] = nk
    info[I_TAGS] = tags
    info[I_PROP_MSGS] = prop_msgs
    info[I_PROPS] = np_
    info[I_SHARDS] = shards
    info[I_BORN] = borns
    info[I_TOPICS] = max(n_topics, 0)
    return OK


@njit(cache=True)
def copy_bodies(body_at, body_len, off, out):
    """The bodies (addresses and lengths from ``gather``; their objects kept alive by the
    caller's list) back to back into ``out``; ``off`` gets the n + 1 offsets. Holds the GIL:
    another thread could otherwise drop a message from the list, and its body, meanwhile."""
    off[0] = 0
    for i in range(len(body_at)):
        off[i + 1] = off[i] + body_len[i]
        memcpy(out.ctypes.data + off[i], body_at[i], body_len[i])


class Gathered:
    """The columns of a gathered batch (views into the calling thread's scratch buffers):
    every key and its message's group; one tag, encoded properties section (docs/format.md's
    entries) and shard key per message (empty: none); born (BORN_AT_PUT: none given); ``info``."""

    __slots__ = ("key_data", "key_off", "key_groups", "tag_data", "tag_off", "prop_data",
                 "prop_off", "shard_data", "shard_off", "has_shard", "born", "info")


class _Scratch(threading.local):
    """Per-thread output buffers, grown (doubled) when a batch does not fit."""

    def __init__(self) -> None:
        self.n = 0
        self.per_msg = 64     # bytes a message each text buffer starts with
        self.items = 8        # keys / properties a message each offset array starts with
        self.bufs: tuple = ()
        self.dict_pos = np.zeros(3, np.int64)

    def buffers(self, n: int) -> tuple:
        if n > self.n:
            self.n = max(n, 2 * self.n)
            self.bufs = ()
        if not self.bufs:
            m = self.n
            u8 = lambda: np.empty(m * self.per_msg, np.uint8)    # noqa: E731
            offs = lambda k: np.empty(k + 1, np.int64)           # noqa: E731
            self.bufs = (u8(), offs(m * self.items), offs(m), u8(), offs(m),
                         np.empty(m * self.per_msg * 4, np.uint8), offs(m), u8(), offs(m),
                         np.empty(m, bool))
        return self.bufs

    def grow(self) -> None:
        self.per_msg *= 2
        self.items *= 2
        self.bufs = ()


_SCRATCH = _Scratch()


def _probe() -> bool:
    """True if this interpreter lays out lists, tuples, ASCII strs and ints as ``gather``
    reads them (read back here through ctypes from known objects)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return False
    try:
        def word(addr: int) -> int:
            return ctypes.c_int64.from_address(addr).value

        s = "probe-text"
        lst = [s, 7]
        tup = (s, None)
        big = 1_700_000_000_123
        state = ctypes.c_uint32.from_address(id(s) + _STATE_AT).value
        digits = [ctypes.c_uint32.from_address(id(big) + _DIGITS_AT + 4 * d).value
                  for d in range(word(id(big) + _SIZE_AT))]
        return (word(id(s) + 8) == id(str) and word(id(s) + _SIZE_AT) == len(s)
                and state & _COMPACT_ASCII == _COMPACT_ASCII
                and ctypes.string_at(id(s) + _ASCII_AT, len(s)) == s.encode()
                and "é".isascii() is False
                and ctypes.c_uint32.from_address(id("é") + _STATE_AT).value & 0x40 == 0
                and word(id(lst) + _SIZE_AT) == 2 and word(word(id(lst) + _ITEMS_AT)) == id(s)
                and word(id(tup) + _SIZE_AT) == 2 and word(id(tup) + _ITEMS_AT) == id(s)
                and sum(d << (30 * i) for i, d in enumerate(digits)) == big
                and word(id(0) + _SIZE_AT) == 0)
    except Exception:   # noqa: BLE001 - any surprise means: do not use the kernel
        return False


USABLE = _probe()
_KINDS = np.array([id(None), id(0), id(str), id(tuple), id(list), id(dict), id(int)], np.int64)
# PyMemberDescrObject's d_member (after PyObject_HEAD, d_type, d_name, d_qualname) and
# PyMemberDef's offset (after name, type)
_MEMBER_DEF_AT = 40
_MEMBER_OFFSET_AT = 16


_CLASS_SLOTS: dict[type, np.ndarray | None] = {}


def _slots_of(cls: type, sample) -> np.ndarray | None:
    """Where instances of ``cls`` (a message class with ``__slots__`` topic, body, _ext) keep
    those three (byte offsets, read from the slot descriptors' ``PyMemberDef``), checked on
    the instance ``sample``; None if ``cls`` is not like that."""
    try:
        offsets = []
        for name in ("topic", "body", "_ext"):
            d = cls.__dict__[name]
            if type(d).__name__ != "member_descriptor":
                return None
            member = ctypes.c_void_p.from_address(id(d) + _MEMBER_DEF_AT).value
            offsets.append(ctypes.c_ssize_t.from_address(member + _MEMBER_OFFSET_AT).value)
        ok = all(ctypes.c_int64.from_address(id(sample) + o).value == id(getattr(sample, name))
                 for o, name in zip(offsets, ("topic", "body", "_ext")))
        return np.array(offsets, np.int64) if ok else None
    except Exception:   # noqa: BLE001 - any surprise means: do not use the kernel
        return None


class Walked(NamedTuple):
    """A batch read by ``walk``: its text columns (``columns.MessageText``), born timestamps
    (int64, BORN_AT_PUT where none was given; None when none was), bodies, and its topics:
    the distinct topics in order of first appearance (told apart by object, or by text when
    ASCII: a non-ASCII name held by two objects appears twice) and each message's index in
    them (None: all have the first), or ``topics`` None if there were too many to number."""

    text: object
    born: np.ndarray | None
    bodies: object
    topics: list | None
    topic_codes: np.ndarray | None


def walk(msgs: list, cls: type, max_body: int) -> Walked | None:
    """``msgs`` (a sequence of ``cls``, the store's Message class; copied into a list first
    unless it is one) read by one compiled walk:
    their keys, tags, properties, shard keys and born timestamps as ``columns.message_text``
    gives them, and their bodies. None when the walk cannot take the batch (a value unusual
    in the sense of the module's docstring, a body not bytes or over ``max_body``, or the
    layout probe failed): the caller then takes its general path, which also names bad
    input. The shard-key and body columns are the caller's; the others are views into this
    thread's scratch buffers, to be encoded before its next call."""
    from strata.format import columns as col
    n = len(msgs)
    if not USABLE or not n:
        return None
    if type(msgs) is not list:   # the kernel reads a list's item array (a tuple's is inline)
        msgs = list(msgs)
    slots = _CLASS_SLOTS.get(cls, False)
    if slots is False:
        slots = _CLASS_SLOTS[cls] = _slots_of(cls, msgs[0])
    if slots is None:
        return None
    kinds = np.append(_KINDS, [id(bytes), id(cls)])
    sc = _SCRATCH
    info = np.zeros(7, np.int64)
    born = np.empty(n, np.int64)
    body_at = np.empty(n, np.int64)
    body_len = np.empty(n, np.int64)
    firsts = np.empty(MAX_TOPICS, np.int64)
    codes = np.empty(n, np.int64)
    while True:
        bufs = sc.buffers(n)
        code = gather(id(msgs), n, kinds, slots, max_body, sc.dict_pos, firsts,
                      codes, body_at, body_len, *bufs, born, info)
        if code != FULL:
            break
        sc.grow()
    if code != OK:
        return None
    (key_data, key_off, key_groups, tag_data, tag_off, prop_data, prop_off, shard_data,
     shard_off, has_shard) = bufs
    n_keys, n_tags, _prop_msgs, n_props, n_shards, n_born, n_topics = info.tolist()
    keys = groups = tags = props = shards = has = None
    if n_keys:
        keys = col.BytesColumn.trusted(key_data, key_off[:n_keys + 1])
        groups = key_groups[:n + 1]
    if n_tags:
        tags = col.BytesColumn.trusted(tag_data, tag_off[:n + 1])
    if n_props:
        props = col.BytesColumn.trusted(prop_data, prop_off[:n + 1])
    if n_shards:
        off = shard_off[:n + 1].copy()
        shards = col.BytesColumn.trusted(shard_data[:int(off[-1])].copy(), off)
        has = None if n_shards == n else has_shard[:n].copy()
    body_off = np.empty(n + 1, np.int64)
    body_data = np.empty(int(body_len.sum()), np.uint8)
    copy_bodies(body_at, body_len, body_off, body_data)
    topics = [msgs[i].topic for i in firsts[:n_topics].tolist()] if n_topics else None
    return Walked(col.MessageText(keys, groups, tags, props, shards, has),
                  born if n_born else None, col.BytesColumn.trusted(body_data, body_off),
                  topics, codes if n_topics > 1 else None)
