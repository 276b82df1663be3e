"""The message objects of a batch read made in compiled code (numba) from the field table of
checked records: what a read costs per message once the records are found and checked.

``make_lazy`` makes the ``BatchMessage``s (``strata.format.batch_message``) of a batch with
CPython's C API — the calls ``tuple.__new__(BatchMessage, ...)`` would end in:
``PyType_GenericAlloc`` for the 4-item tuple (here: memory from a free list of freed
messages' when it has some), ``PyBytes_FromStringAndSize`` for the body straight from the
buffer (here: the same steps without the call, ``new_body``), the topic name shared (one per
distinct topic, learnt in a dict), the batch's rows and the message's column (an int from a
cache this module keeps) referenced, and the items stored the way ``PyTuple_SET_ITEM``
stores them (no call per item). The fixed fields
stay in the table until read. Side by side (2-core VM, 1000 × 100 B, made and freed) a
``BatchMessage`` costs ~60 ns against ~15 ns for its body alone; the 14-item
``StoredMessage`` with its own int objects that this maker replaced cost ~2.5× as much. The
tuples hold a str, a bytes, an int and the rows (which refer to no message), which can never
be part of a reference cycle, so they are taken off the garbage collector's lists at birth
(CPython does the same for plain tuples of such values when it first meets them); the
collector's passes over a million messages of a scan would otherwise cost a third as much as
making them.

``make_lazy_within`` is ``make_lazy`` with the bounds of the table checked in the same call (a
``get``'s batch); ``make_scanned`` makes a scan's batch whole — its messages, the one buffer
of hosts, topic and properties they read their other fields from, and their table — in one
call over the segment's map. Freeing them is compiled too (``strata.format.message_dealloc``).

``make_bodies`` makes the bodies alone (``MessageBatch.bodies``); ``new_bytes`` hands out a
bytes object whose bytes the caller fills (the batch reader packs a batch's records straight
into the bytes its ``MessageBatch`` keeps).

The kernels run holding the GIL (no ``nogil``), on objects the caller keeps alive for the call,
passed by address (``id``). Pure over buffers: no file I/O, no threads.
"""

from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
from llvmlite import binding as _llvm_binding
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from strata.format import record as rec
from strata.format.record_kernels import memcpy
from strata.format.record_table import F_BODY_AT, F_BODY_END, F_HOSTS_AT, F_PROPS_AT, \
    F_TOPIC_AT, FIELDS

_OBJ = ir.IntType(8).as_pointer()
_I64 = ir.IntType(64)


def _c_api(name: str, ret: str, *args: str):
    """A compiled call of C-API function ``name``. ``args`` and ``ret`` are "obj" (a
    ``PyObject *``, an int64 address on the numba side), "int" (int64 / ``Py_ssize_t``),
    "int32" (a return code) or "void"."""
    def codegen(context, builder, signature, values):
        ret_ty = {"obj": _OBJ, "int32": ir.IntType(32), "void": ir.VoidType()}[ret]
        fnty = ir.FunctionType(ret_ty, [_OBJ if a == "obj" else _I64 for a in args])
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        out = builder.call(fn, [builder.inttoptr(v, _OBJ) if a == "obj" else v
                                for v, a in zip(values, args)])
        if ret == "obj":
            return builder.ptrtoint(out, _I64)
        if ret == "int32":
            return builder.sext(out, _I64)
        return context.get_dummy_value()

    sig = (types.none if ret == "void" else types.int64)(*([types.int64] * len(args)))
    if not args:
        def typer(typingctx):
            return sig, codegen
    elif len(args) == 1:
        def typer(typingctx, a):
            return sig, codegen
    elif len(args) == 2:
        def typer(typingctx, a, b):
            return sig, codegen
    else:
        def typer(typingctx, a, b, c):
            return sig, codegen
    return intrinsic(typer)


_alloc = _c_api("PyType_GenericAlloc", "obj", "obj", "int")      # new reference
_untrack = _c_api("PyObject_GC_UnTrack", "void", "obj")
_malloc = _c_api("PyObject_Malloc", "obj", "int")               # NULL, no error set, if none
# A new tuple's items are set the way CPython's own PyTuple_SET_ITEM macro sets them: a store
# into the item array, which starts right after the fixed part of the object (no call, no checks
# the kernel needs: the tuple is new, its slots NULL, the indices fixed).
_ITEMS_AT = tuple.__basicsize__
_BYTES_DATA_AT = bytes.__basicsize__ - 1   # a bytes object's first byte (checked below)
BYTES_DATA_AT = _BYTES_DATA_AT
assert tuple.__itemsize__ == 8 and rec.StoredMessage.__basicsize__ == _ITEMS_AT
# Where kernels that read a caller's list of ``bytes`` in place find things (``object_gather``,
# ``strata.refstore.append`` / ``batch_split``): an object's type, a variable-size object's
# ``ob_size`` (list, tuple, bytes, int) and a list's item pointer (``ob_item``). Checked by
# ``LISTS_OF_BYTES`` below; a kernel that needs them takes its general path where it is False.
TYPE_AT = 8
VAR_SIZE_AT = 16
LIST_ITEMS_AT = 24


def _lists_of_bytes_hold() -> bool:
    """Whether a list of ``bytes`` and its items are laid out at ``TYPE_AT``,
    ``VAR_SIZE_AT``, ``LIST_ITEMS_AT`` and ``BYTES_DATA_AT`` in this interpreter (read back
    through ctypes from known objects)."""
    try:
        def word(addr: int) -> int:
            return ctypes.c_int64.from_address(addr).value

        body = b"probe-bytes-layout"
        items = [body, b"x" * 16]
        at = word(id(items) + LIST_ITEMS_AT)
        return (word(id(items) + TYPE_AT) == id(list) and word(id(items) + VAR_SIZE_AT) == 2
                and word(at) == id(body) and word(at + 8) == id(items[1])
                and word(id(body) + TYPE_AT) == id(bytes)
                and word(id(body) + VAR_SIZE_AT) == len(body)
                and ctypes.string_at(id(body) + BYTES_DATA_AT, len(body)) == body)
    except (ValueError, OSError):     # pragma: no cover - not CPython's layout
        return False


LISTS_OF_BYTES = _lists_of_bytes_hold()


@intrinsic
def store_i64(typingctx, addr, value):
    """``*(int64 *)addr = value``."""
    def codegen(context, builder, signature, args):
        builder.store(args[1], builder.inttoptr(args[0], _I64.as_pointer()))
        return context.get_dummy_value()
    return types.none(types.int64, types.int64), codegen


@intrinsic
def load_i64(typingctx, addr):
    """``*(int64 *)addr``."""
    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], _I64.as_pointer()))
    return types.int64(types.int64), codegen


@njit(cache=True, inline="always")
def _tuple_set(t, i, o):
    """PyTuple_SET_ITEM: tuple ``t``'s slot ``i`` (NULL until now) takes ``o``'s reference."""
    store_i64(t + _ITEMS_AT + 8 * i, o)


@njit(cache=True, inline="always")
def _hold(o):
    """``Py_INCREF(o)`` as CPython 3.11's macro does it (the count raised in place): what
    ``Py_IncRef`` does, without a call per object."""
    store_i64(o, load_i64(o) + 1)


_list_set = _c_api("PyList_SetItem", "int32", "obj", "int", "obj")     # steals the item
_int = _c_api("PyLong_FromLongLong", "obj", "int")               # new reference
_bytes = _c_api("PyBytes_FromStringAndSize", "obj", "int", "int")    # new reference
_ascii = _c_api("PyUnicode_DecodeASCII", "obj", "int", "int", "int")  # new reference
_dict_get = _c_api("PyDict_GetItem", "obj", "obj", "obj")        # borrowed, NULL if absent
_dict_set = _c_api("PyDict_SetItem", "int32", "obj", "obj", "obj")
_incref = _c_api("Py_IncRef", "void", "obj")
_decref = _c_api("Py_DecRef", "void", "obj")
_err_clear = _c_api("PyErr_Clear", "void")

# An untracked tuple of a heap type, made without the collector (``direct``): the memory that
# PyType_GenericAlloc takes (the collector's 16-byte header, then the object), the header left
# "not tracked" (zeros), the object's refcount 1, its type (a reference to it) and size, its
# items NULL. What this skips is the collector's bookkeeping of a new object — the count that
# starts a collection every 700 of them although these are never tracked: side by side, a
# batch read of 1000 messages ran one collection of the young objects per call, ~1/3 of the
# time of making and freeing the messages. Freed as any: the type's dealloc untracks (a
# no-op) and PyObject_GC_Del releases the header with the object. ``direct_ok`` checks the
# layout on this interpreter before it is used; else PyType_GenericAlloc and untrack.
_GC_HEAD = 16

# The free list of message memory: a freed ``BatchMessage`` that was made untracked leaves its
# memory here (``message_dealloc``) for the next one made, up to FREE_CAP of them — what
# CPython's own free lists do for tuples of up to 20 items, which a tuple subclass does not
# get. Why: a read that hands out every message spent ~10 ns a message in PyObject_Malloc and
# PyObject_Free for the tuple alone, and memory just freed is still in the cache. The list is
# an int64 array — how many blocks it holds, how many it may hold (0 unless ``direct_ok``: a
# block is set up the way ``_new_untracked`` sets up its own), then the blocks' addresses, each
# the collector's header and a 4-item tuple's object — that the compiled code finds through an
# external symbol bound in this process (``llvmlite.binding.add_symbol``), so code loaded from
# numba's cache finds this process's list. Only ever touched holding the GIL (making and
# freeing messages both do).
FREE_CAP = 1 << 13
FREE_SYMBOL = "strata_batch_message_free_list"
# (raw memory, never freed: messages may be freed until the very end of the process, after this
# module's objects are gone)
_raw_calloc = ctypes.pythonapi.PyMem_RawCalloc
_raw_calloc.argtypes, _raw_calloc.restype = (ctypes.c_size_t, ctypes.c_size_t), ctypes.c_void_p
_FREE_LIST = (ctypes.c_int64 * (FREE_CAP + 2)).from_address(_raw_calloc(FREE_CAP + 2, 8))
_llvm_binding.add_symbol(FREE_SYMBOL, ctypes.addressof(_FREE_LIST))
FREE_WIDTH = 4   # the items of the tuples the list holds (a BatchMessage's)


def _bound_address(symbol: str):
    """A compiled ``address()`` of external ``symbol``: a declaration the code is linked
    against when it is loaded (from numba's cache too), to what this process bound the name to
    (``add_symbol``), never an address of the process that compiled it."""
    @intrinsic
    def address(typingctx):
        def codegen(context, builder, signature, args):
            g = builder.module.globals.get(symbol)
            if g is None:
                g = ir.GlobalVariable(builder.module, ir.IntType(8), symbol)
                g.linkage = "external"
            return builder.ptrtoint(g, _I64)
        return types.int64(), codegen
    return address


free_list = _bound_address(FREE_SYMBOL)   # the free list's address


# bytes objects made here directly (``new_body``), as PyBytes_FromStringAndSize makes them:
# PyObject_Malloc of the object's fixed part and its bytes, the count 1, the type (static: no
# reference taken), the size, the hash not taken yet (-1), the bytes and a closing NUL. The
# type's address is found as the free list is (an external symbol bound per process).
BYTES_TYPE_SYMBOL = "strata_bytes_type"
_llvm_binding.add_symbol(BYTES_TYPE_SYMBOL, id(bytes))


bytes_type = _bound_address(BYTES_TYPE_SYMBOL)   # the address of ``bytes`` (PyBytes_Type)


@intrinsic
def store_u8(typingctx, addr, value):
    """``*(uint8_t *)addr = value``."""
    def codegen(context, builder, signature, args):
        builder.store(builder.trunc(args[1], ir.IntType(8)),
                      builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
        return context.get_dummy_value()
    return types.none(types.int64, types.int64), codegen


def free_list_held() -> int:
    """How many blocks the free list holds now."""
    return _FREE_LIST[0]


_py_free = ctypes.pythonapi.PyObject_Free
_py_free.argtypes, _py_free.restype = (ctypes.c_void_p,), None


def release_free_list(keep: bool = True) -> int:
    """Give the free list's blocks back to CPython's allocator (and, unless ``keep``, stop
    keeping freed messages' memory: what a process whose layout check failed has); returns
    how many there were. Call holding the GIL, as any Python code does."""
    n = _FREE_LIST[0]
    for i in range(n):
        _py_free(_FREE_LIST[2 + i])
    _FREE_LIST[0] = 0
    if not keep:
        _FREE_LIST[1] = 0
    return n


def keep_free_list() -> None:
    """Keep freed messages' memory again (where ``direct_ok``)."""
    _FREE_LIST[1] = FREE_CAP if direct_ok() else 0


@njit(cache=True, inline="always")
def _new_untracked(cls, n, direct):
    fl = free_list()
    k = load_i64(fl)
    if n == FREE_WIDTH and k > 0:   # the block freed last (still in the cache)
        p = load_i64(fl + 8 * (k + 1))
        store_i64(fl, k - 1)
    elif not direct:
        m = _alloc(cls, n)
        if m != 0:
            _untrack(m)
        return m
    else:
        p = _malloc(_GC_HEAD + _ITEMS_AT + 8 * n)
        if p == 0:
            return 0
    store_i64(p, 0)
    store_i64(p + 8, 0)
    m = p + _GC_HEAD
    store_i64(m, 1)
    _hold(cls)
    store_i64(m + 8, cls)
    store_i64(m + 16, n)
    for j in range(n):
        store_i64(m + _ITEMS_AT + 8 * j, 0)
    return m


@njit(cache=True, inline="always")
def new_body(src, n):
    """A new bytes object of the ``n`` bytes at ``src`` (0, no error set, if there is no
    memory): made here, not by a call (PyBytes_FromStringAndSize), but for the 0- and 1-byte
    ones, which CPython shares."""
    if n < 2:
        return _bytes(src, n)
    b = _malloc(_BYTES_DATA_AT + 1 + n)
    if b == 0:
        return 0
    store_i64(b, 1)
    store_i64(b + 8, bytes_type())
    store_i64(b + 16, n)
    store_i64(b + 24, -1)
    memcpy(b + _BYTES_DATA_AT, src, n)
    store_u8(b + _BYTES_DATA_AT + n, 0)
    return b


@intrinsic
def data_u8(typingctx, addr):
    """The byte at ``addr``."""
    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
    return types.uint8(types.int64), codegen


@njit(cache=True)
def _same(base, a, b, n):
    """Whether the ``n`` bytes at ``base + a`` and ``base + b`` are equal."""
    if a == b:
        return True
    for j in range(n):
        if data_u8(base + a + j) != data_u8(base + b + j):
            return False
    return True


@njit(cache=True)
def _topic_name(base, fields, c, topics, own, t_at, t_end):
    """The topic name of column ``c``: ``(own, t_at, t_end)`` again when its bytes are those
    at ``[t_at, t_end)`` whose name the caller holds a reference to (``own``), else that of
    the new name (taken from ``topics``, a dict of topic bytes to names, or made and added
    there) with the reference to the old one released; ``(own, -1, -1)`` (the old name
    still held) if a name could not be made."""
    at, end = fields[F_TOPIC_AT, c], fields[F_PROPS_AT, c]
    if own != 0 and end - at == t_end - t_at and _same(base, at, t_at, end - at):
        return own, t_at, t_end
    key = _bytes(base + at, end - at)
    if key == 0:
        return own, -1, -1
    name = _dict_get(topics, key)
    if name != 0:
        _incref(name)
    else:
        name = _ascii(base + at, end - at, 0)
        if name == 0 or _dict_set(topics, key, name) != 0:
            _decref(key)
            if name != 0:
                _decref(name)
            return own, -1, -1
    _decref(key)
    if own != 0:
        _decref(own)
    return name, at, end


@njit("int64(int64, int64[:, :], int64, int64, int64, int64, int64, int64, int64[:], int64, "
      "int64)", cache=True)
def make_lazy(base, fields, first, count, cls, topic, topics, rows, column_ids, out, direct):
    """Make ``BatchMessage``s (type ``cls``: a 4-item tuple of topic, body, ``rows`` and the
    message's column) of the field-table columns ``[first, first + count)`` into
    ``out[0:count]``, as ``make_messages`` makes ``StoredMessage``s: the topic shared, the
    body a bytes object straight from the buffer at ``base``, ``rows`` (the batch's
    ``BatchRows``) referenced, the column an int from a cache (``column_ids[c]`` the address
    of int ``c``, kept alive by the caller; made when past the cache). No other object per
    message. ``direct``: the tuples are made by ``_new_untracked`` (``DIRECT``). Returns
    ``count``, or -1 if an object could not be made (the Python error cleared; ``out`` partly
    filled)."""
    own_topic = 0
    t_at = t_end = 0
    made = 0
    cached = len(column_ids)
    for k in range(count):
        c = first + k
        m = _new_untracked(cls, 4, direct)  # a str, bytes, an int, the rows: never a cycle
        if m == 0:
            break
        if _list_set(out, k, m) != 0:
            break
        if topic != 0:
            name = topic
        else:
            own_topic, t_at, t_end = _topic_name(base, fields, c, topics, own_topic, t_at,
                                                 t_end)
            if t_at < 0:
                break
            name = own_topic
        _hold(name)
        _tuple_set(m, 0, name)
        body = new_body(base + fields[F_BODY_AT, c], fields[F_BODY_END, c] -
                        fields[F_BODY_AT, c])
        if body == 0:
            break
        _tuple_set(m, 1, body)
        _hold(rows)
        _tuple_set(m, 2, rows)
        if c < cached:
            col = column_ids[c]
            _hold(col)
        else:
            col = _int(c)
            if col == 0:
                break
        _tuple_set(m, 3, col)
        made += 1
    if own_topic != 0:
        _decref(own_topic)
    if made < count:
        _err_clear()
        return -1
    return count


@njit("int64(int64, int64, int64[:, :], int64, int64, int64, int64, int64, int64, int64[:], "
      "int64, int64)", cache=True)
def make_lazy_within(size, base, fields, first, count, cls, topic, topics, rows, column_ids,
                     out, direct):
    """``make_lazy`` after checking that every section of columns ``[first, first + count)``
    lies within the ``size`` bytes at ``base``: -2 (nothing made) if one does not."""
    for c in range(first, first + count):
        a, e = fields[F_HOSTS_AT, c], fields[F_BODY_END, c]
        if a < 0 or e > size:
            return -2
    return make_lazy(base, fields, first, count, cls, topic, topics, rows, column_ids, out,
                     direct)


@njit(cache=True)   # (typed at the call: ``data`` may be a read-only buffer's array)
def make_scanned(data, fields, heads, cls, topic, topics, rows, column_ids, out, direct,
                 holder):
    """A scan's batch in one call: the ``BatchMessage``s of every column of ``fields`` (good
    records in ``data``, a segment's map) into ``out``, as
    ``make_lazy`` makes them (bodies straight from the map), and what they read their other
    fields from: the hosts, topic and properties of every record copied into ONE new bytes
    object (put into ``holder[0]``, a 1-item list: the caller's ``BatchRows``, ``rows``, takes
    it as its buffer) and ``heads`` filled with ``fields``' rows, its positions moved into
    that buffer (each body's position and end where its properties end) — what
    ``record_kernels.pack_heads_to`` over a copy of the table did, without the copy, the
    second pass and the calls between. ``fields`` is not changed. Returns the count, -1 if an
    object could not be made (the Python error cleared), -2 if a position lies outside the
    map."""
    base, size = data.ctypes.data, len(data)
    count = fields.shape[1]
    total = 0
    for c in range(count):
        a, b, e = fields[F_HOSTS_AT, c], fields[F_BODY_AT, c], fields[F_BODY_END, c]
        if a < 0 or b < a or e < b or e > size:
            return -2
        total += b - a
    buf = _bytes(0, total)   # PyBytes_FromStringAndSize(NULL, total): bytes to fill
    if buf == 0:
        _err_clear()
        return -1
    if _list_set(holder, 0, buf) != 0:
        _err_clear()
        return -1
    for k in range(FIELDS):   # row by row: a column's 15 fields lie a row apart
        for c in range(count):
            heads[k, c] = fields[k, c]
    at = 0
    o0 = buf + _BYTES_DATA_AT
    for c in range(count):
        start = fields[F_HOSTS_AT, c]
        n = fields[F_BODY_AT, c] - start
        memcpy(o0 + at, base + start, n)
        for k in range(F_HOSTS_AT, F_BODY_AT + 1):
            heads[k, c] += at - start
        heads[F_BODY_END, c] = heads[F_BODY_AT, c]
        at += n
    return make_lazy(base, fields, 0, count, cls, topic, topics, rows, column_ids, out, direct)


# ints 0..n-1 for make_lazy's columns, kept alive here; grown on demand up to COLUMN_CACHE (a
# column past it gets an int of its own)
COLUMN_CACHE = 1 << 16
_COLUMN_INTS: list[int] = []
_COLUMN_IDS = np.zeros(0, np.int64)


def column_ids(n: int) -> np.ndarray:
    """Addresses of the ints 0 .. min(n, COLUMN_CACHE) - 1, which this module keeps alive."""
    global _COLUMN_IDS
    n = min(n, COLUMN_CACHE)
    if len(_COLUMN_IDS) < n:
        _COLUMN_INTS.extend(range(len(_COLUMN_INTS),
                                  min(max(n, 2 * len(_COLUMN_INTS), 4096), COLUMN_CACHE)))
        _COLUMN_IDS = np.array([id(i) for i in _COLUMN_INTS], np.int64)
    return _COLUMN_IDS[:n]


@njit("int64(int64, int64[:, :], int64, int64, int64)", cache=True)
def make_bodies(base, fields, first, count, out):
    """The bodies alone of the field-table columns ``[first, first + count)``: a bytes object
    each (straight from the buffer at ``base``) into ``out[0:count]`` (a list of that length,
    passed by address), for a reader that wants only the bodies — no message tuple, no int
    objects. Returns ``count``, or -1 if one could not be made (the Python error cleared)."""
    for k in range(count):
        c = first + k
        body = new_body(base + fields[F_BODY_AT, c], fields[F_BODY_END, c] -
                        fields[F_BODY_AT, c])
        if body == 0 or _list_set(out, k, body) != 0:
            _err_clear()
            return -1
    return count

# A bytes object to fill: PyBytes_FromStringAndSize(NULL, n) leaves its n bytes unset, so a
# compiled copy can write a batch's records straight into the object a MessageBatch keeps
# (one copy out of the segment's map, not two through a numpy array and ``tobytes``). The bytes
# start right after the fixed part of the object; checked once here.
_new_bytes_c = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes_c.restype = ctypes.py_object
_new_bytes_c.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_probe = _new_bytes_c(b"strata", 6)
assert ctypes.string_at(id(_probe) + _BYTES_DATA_AT, 6) == b"strata"
del _probe


def new_bytes(n: int) -> tuple[bytes, int]:
    """A new bytes object of ``n`` unset bytes and the address of its first byte, for the
    caller to fill before anyone else sees the object (its hash is not taken yet)."""
    if n <= 0:
        return b"", 0
    b = _new_bytes_c(None, n)
    return b, id(b) + _BYTES_DATA_AT


def direct_ok() -> bool:
    """Whether ``make_lazy`` may make its tuples directly on this interpreter: a release
    build whose GC objects carry a 16-byte header (what ``sys.getsizeof`` adds), and a probe
    made that way is the untracked, singly referenced message it should be."""
    from strata.format.batch_message import BatchMessage, BatchRows

    if hasattr(sys, "gettotalrefcount") or not BatchMessage.__flags__ & (1 << 9):
        return False   # a debug build (its objects are linked in a list), or not a heap type
    body = b"strata"
    rows = BatchRows(b"", np.zeros((FIELDS, 1), np.int64))
    probe = BatchMessage.of("t", body, rows, 0)
    if sys.getsizeof(probe) - probe.__sizeof__() != _GC_HEAD or \
            BatchMessage.__basicsize__ != _ITEMS_AT:
        return False
    fields = np.zeros((FIELDS, 1), np.int64)
    fields[F_BODY_END, 0] = len(body)
    out = [None]
    types_refs = sys.getrefcount(BatchMessage)
    made = make_lazy(id(body) + _BYTES_DATA_AT, fields, 0, 1, id(BatchMessage), id("t"), 0,
                     id(rows), column_ids(1), id(out), 1)
    m = out[0]
    ok = made == 1 and type(m) is BatchMessage and tuple.__len__(m) == 4 and \
        not gc.is_tracked(m) and sys.getrefcount(m) == 3 and m == probe and \
        m.body == body and m._rows is rows and sys.getrefcount(BatchMessage) == types_refs + 1
    del m, out
    return ok and sys.getrefcount(BatchMessage) == types_refs


DIRECT = 1 if direct_ok() else 0
_FREE_LIST[1] = FREE_CAP if DIRECT else 0   # (only where blocks are made directly)
