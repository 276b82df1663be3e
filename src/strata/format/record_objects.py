"""``StoredMessage`` objects made in compiled code (numba) from the field table of checked
records: what a read costs per message once the records are found and checked.

Made in Python, a message costs ~0.6 µs (a tuple subclass built through ``type.__call__``, ten
ints, three slices); ``make_messages`` builds the same tuples with CPython's C API — the calls
``StoredMessage((...))`` would end in — at ~0.14 µs: ``PyType_GenericAlloc`` for the tuple,
``PyLong_FromLongLong`` for the fixed fields, ``PyBytes_FromStringAndSize`` for the body straight
from the buffer, and the tuple's items stored the way ``PyTuple_SET_ITEM`` stores them (no call
per item: ~17 % less than ``PyTuple_SetItem`` side by side). A value equal to the previous
message's (a timestamp of one batch, the topic, the hosts of one producer, the properties of
plain messages) is shared, not made again, as the Python reader shares them too. The tuples
hold only str, int and bytes, which can never be part of a reference cycle, so they are taken
off the garbage collector's lists at birth (CPython does the same for plain tuples of such
values when it first meets them); the collector's passes over
a million messages of a scan would otherwise cost a third as much as making them.

``new_bytes`` hands out a bytes object whose bytes the caller fills (the batch reader packs a
batch's records straight into the bytes its ``MessageBatch`` keeps).

The kernel runs holding the GIL (no ``nogil``), on objects the caller keeps alive for the call,
passed by address (``id``). Pure over buffers: no file I/O, no threads.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from strata.format import record as rec
from strata.format.record_table import (
    F_BODY_AT, F_BODY_END, F_BORN_TS, F_FLAG, F_HOSTS_AT, F_PHYS, F_PROPS_AT, F_QUEUE_ID,
    F_QUEUE_OFFSET, F_RECONSUME, F_STORE_TS, F_SYS_FLAG, F_TOPIC_AT, F_TOTAL, F_TX_OFFSET)

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
# A new tuple's items are set the way CPython's own PyTuple_SET_ITEM macro sets them: a store
# into the item array, which starts right after the fixed part of the object (no call, no checks
# the kernel needs: the tuple is new, its slots NULL, the indices fixed).
_ITEMS_AT = tuple.__basicsize__
assert tuple.__itemsize__ == 8 and rec.StoredMessage.__basicsize__ == _ITEMS_AT


@intrinsic
def _store_i64(typingctx, addr, value):
    """``*(int64 *)addr = value``."""
    def codegen(context, builder, signature, args):
        builder.store(args[1], builder.inttoptr(args[0], _I64.as_pointer()))
        return context.get_dummy_value()
    return types.none(types.int64, types.int64), codegen


@njit(cache=True, inline="always")
def _tuple_set(t, i, o):
    """PyTuple_SET_ITEM: tuple ``t``'s slot ``i`` (NULL until now) takes ``o``'s reference."""
    _store_i64(t + _ITEMS_AT + 8 * i, o)


_list_set = _c_api("PyList_SetItem", "int32", "obj", "int", "obj")     # steals the item
_int = _c_api("PyLong_FromLongLong", "obj", "int")               # new reference
_bytes = _c_api("PyBytes_FromStringAndSize", "obj", "int", "int")    # new reference
_ascii = _c_api("PyUnicode_DecodeASCII", "obj", "int", "int", "int")  # new reference
_dict_get = _c_api("PyDict_GetItem", "obj", "obj", "obj")        # borrowed, NULL if absent
_dict_set = _c_api("PyDict_SetItem", "int32", "obj", "obj", "obj")
_incref = _c_api("Py_IncRef", "void", "obj")
_decref = _c_api("Py_DecRef", "void", "obj")
_err_clear = _c_api("PyErr_Clear", "void")

# Where each field goes in the StoredMessage tuple (record.StoredMessage.FIELDS).
SLOT = {name: i for i, name in enumerate(rec.StoredMessage.FIELDS)}
_TOPIC, _BODY = SLOT["topic"], SLOT["body"]
_PROPS, _HOSTS = SLOT["properties_raw"], SLOT["hosts_raw"]
# (tuple slot, field-table row) of the int fields
_INTS = np.array([(SLOT["queue_id"], F_QUEUE_ID), (SLOT["queue_offset"], F_QUEUE_OFFSET),
                  (SLOT["commitlog_offset"], F_PHYS), (SLOT["born_timestamp"], F_BORN_TS),
                  (SLOT["store_timestamp"], F_STORE_TS), (SLOT["reconsume_times"], F_RECONSUME),
                  (SLOT["flag"], F_FLAG), (SLOT["sys_flag"], F_SYS_FLAG),
                  (SLOT["prepared_transaction_offset"], F_TX_OFFSET), (SLOT["size"], F_TOTAL)],
                 np.int64)
_WIDTH = len(rec.StoredMessage.FIELDS)
assert sorted([_TOPIC, _BODY, _PROPS, _HOSTS] + _INTS[:, 0].tolist()) == list(range(_WIDTH))


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
def _section(base, at, end, prev_obj, prev_at, prev_end):
    """A new reference to the bytes ``[at, end)`` of the buffer: ``prev_obj`` again when it
    holds the same bytes (``[prev_at, prev_end)``), else a new bytes object (0 if that
    failed)."""
    if prev_obj != 0 and end - at == prev_end - prev_at and \
            _same(base, at, prev_at, end - at):
        _incref(prev_obj)
        return prev_obj
    return _bytes(base + at, end - at)


@njit("int64(int64, int64[:, :], int64, int64, int64, int64, int64, int64)", cache=True)
def make_messages(base, fields, first, count, cls, topic, topics, out):
    """Make ``StoredMessage``s (type ``cls``) of the field-table columns ``[first, first +
    count)`` into ``out[0:count]`` (a list of that length). Addresses: ``base`` of the buffer
    the table's positions point into; ``cls``, ``topic`` (every message's topic, a str; 0 to
    read each one's from the buffer), ``topics`` (a dict of topic bytes to names, the names
    learnt here added) and ``out`` of the objects. Returns ``count``, or -1 if an object could
    not be made (the Python error cleared; ``out`` partly filled)."""
    own_topic = 0        # a reference held to the last topic name met
    prev = np.zeros(_WIDTH, np.int64)   # the previous message's items (out holds them)
    t_at = t_end = 0
    made = 0
    for k in range(count):
        c = first + k
        m = _alloc(cls, _WIDTH)
        if m == 0:
            break
        _untrack(m)
        if _list_set(out, k, m) != 0:    # out owns m from here on (its items start as NULL)
            break
        # the topic
        if topic != 0:
            name = topic
        else:
            at, end = fields[F_TOPIC_AT, c], fields[F_PROPS_AT, c]
            if own_topic == 0 or end - at != t_end - t_at or not _same(base, at, t_at, end - at):
                key = _bytes(base + at, end - at)
                if key == 0:
                    break
                name = _dict_get(topics, key)
                if name != 0:
                    _incref(name)
                else:
                    name = _ascii(base + at, end - at, 0)
                    if name == 0 or _dict_set(topics, key, name) != 0:
                        _decref(key)
                        if name != 0:
                            _decref(name)
                        break
                _decref(key)
                if own_topic != 0:
                    _decref(own_topic)
                own_topic = name
                t_at, t_end = at, end
            name = own_topic
        _incref(name)
        _tuple_set(m, _TOPIC, name)
        # the fixed fields, each shared with the previous message when equal
        ok = True
        for j in range(len(_INTS)):
            slot, row = _INTS[j, 0], _INTS[j, 1]
            v = fields[row, c]
            if k > 0 and v == fields[row, c - 1]:
                o = prev[slot]
                _incref(o)
            else:
                o = _int(v)
                if o == 0:
                    ok = False
                    break
            _tuple_set(m, slot, o)
            prev[slot] = o
        if not ok:
            break
        body = _bytes(base + fields[F_BODY_AT, c], fields[F_BODY_END, c] - fields[F_BODY_AT, c])
        if body == 0:
            break
        _tuple_set(m, _BODY, body)
        p = c - 1
        props = _section(base, fields[F_PROPS_AT, c], fields[F_BODY_AT, c],
                         prev[_PROPS],
                         fields[F_PROPS_AT, p], fields[F_BODY_AT, p])
        if props == 0:
            break
        _tuple_set(m, _PROPS, props)
        prev[_PROPS] = props
        hosts = _section(base, fields[F_HOSTS_AT, c], fields[F_TOPIC_AT, c],
                         prev[_HOSTS],
                         fields[F_HOSTS_AT, p], fields[F_TOPIC_AT, p])
        if hosts == 0:
            break
        _tuple_set(m, _HOSTS, hosts)
        prev[_HOSTS] = hosts
        made += 1
    if own_topic != 0:
        _decref(own_topic)
    if made < count:
        _err_clear()
        return -1
    return count



@njit("int64(int64, int64[:, :], int64, int64, int64)", cache=True)
def make_bodies(base, fields, first, count, out):
    """The bodies alone of the field-table columns ``[first, first + count)``: a bytes object
    each (straight from the buffer at ``base``) into ``out[0:count]`` (a list of that length,
    passed by address), for a reader that wants only the bodies — no message tuple, no int
    objects. Returns ``count``, or -1 if one could not be made (the Python error cleared)."""
    for k in range(count):
        c = first + k
        body = _bytes(base + fields[F_BODY_AT, c], fields[F_BODY_END, c] - fields[F_BODY_AT, c])
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
_BYTES_DATA_AT = bytes.__basicsize__ - 1
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
