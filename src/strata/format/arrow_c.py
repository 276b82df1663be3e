"""A views read as an Arrow record batch in the Arrow C data interface, written by compiled code
(numba): ``get_columns``' record batch without a Python call per array.

Building the batch with pyarrow calls (``Array.from_buffers`` for each of seven columns, then
``RecordBatch.from_arrays``) cost ~8–10 µs a call, a third of a 1,000-message call at 100 B.
``fill_views_batch`` instead writes, in one compiled call, the ``ArrowArray`` structs of the
whole batch into one int64 block; ``pyarrow.RecordBatch._import_from_c`` then takes them with
the batch's schema (kept as a pyarrow object: nothing to write for it).

The C data interface (Arrow's "C Data Interface" specification): an ``ArrowArray`` is ten
64-bit words — ``length``, ``null_count``, ``offset``, ``n_buffers``, ``n_children``,
``buffers`` (address of ``n_buffers`` addresses), ``children`` (address of ``n_children``
addresses of ``ArrowArray``), ``dictionary``, ``release`` (a C function pointer, NULL once
released) and ``private_data``. A record batch is a struct array (one buffer: its validity
bitmap, NULL without nulls) whose children are the columns. An int64 column has two buffers
(validity, values), a ``binary_view`` column ``2 + k + 1``: validity, the 16-byte views, the
``k`` data buffers the views point into, and an int64 array of those buffers' sizes. A
``list<string>`` has validity and int32 offsets, and one child: the strings (validity, int32
offsets, bytes).

The block (``WORDS`` int64), structs in order: 0 the batch, 1–4 the int64 columns (rows
``V_QUEUE_OFFSET``, ``V_PHYS``, ``V_STORE_TS``, ``V_BORN_TS`` of the views table: no copy),
5 the bodies and 7 the properties sections (``binary_view`` over the read's views and its one
span), 6 the keys (``list<string>``: the caller's int32 list offsets), 8 the keys' strings
(the caller's int32 offsets and bytes; for a read without properties all three are one
array of zeros). Then the buffer address lists
(``_BUFFERS`` words), the children address lists (7 for the batch, 1 for the keys), the
one variadic size (the span's length, shared by both view columns), the ``FLAG`` word and
three words where ``read_batch`` says what it read (``START``, ``OWN``, ``PROPS``).

Ownership: the batch's ``release`` is ``batch_release``, compiled code (no Python, so callable
from any thread without the GIL) that marks the batch released and sets the block's ``FLAG``
word (its ``private_data`` holds that word's address); the caller keeps the block and the
arrays the buffers point into until it sees the flag. The children's ``release`` is
``child_release``, which only marks them released (the C data interface has a consumer
release the batch alone; its children live in the same block).

``read_batch`` reads records back to back and writes the same block into ``get_columns``' one
buffer a call (``call_words``: the structs, then the views table, the views, the empty key
lists' offsets and the pass's scratch), in ONE compiled call; ``fill_read`` writes the block
for a read done by another pass.

Pure functions over numpy arrays. Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import cfunc, njit, types
from numba.extending import intrinsic

from strata.format.property_kernels import scan_properties
from strata.format.record_kernels import memcpy
from strata.format.record_table import (
    V_BORN_TS, V_PHYS, V_QUEUE_OFFSET, V_STORE_TS, VIEW_FIELDS)
from strata.format.view_kernels import in_place

_W = 10                      # words of an ArrowArray
_STRUCTS = 9                 # the batch, its 7 columns, the keys' strings
_N_BUFFERS = np.array([1, 2, 2, 2, 2, 4, 2, 4, 3], np.int64)
_BUFFERS = _W * _STRUCTS     # where the buffer address lists start
_CHILDREN = _BUFFERS + int(_N_BUFFERS.sum())
_SIZES = _CHILDREN + 8       # the views' one variadic buffer size
FLAG = _SIZES + 1            # set (to 1) by ``batch_release`` once Arrow let the batch go
START, OWN, PROPS = FLAG + 1, FLAG + 2, FLAG + 3   # ``read_batch``'s span and properties
WORDS = PROPS + 1
_LENGTH, _N_BUF, _N_CHILD, _BUF, _CHILD, _RELEASE, _PRIVATE = 0, 3, 4, 5, 6, 8, 9
_INT_ROWS = np.array([V_QUEUE_OFFSET, V_PHYS, V_STORE_TS, V_BORN_TS], np.int64)


@cfunc(types.void(types.CPointer(types.int64)), cache=True, nogil=True)
def child_release(p):
    """A column's ``release``: marks it released (its memory is the batch's block)."""
    p[_RELEASE] = 0


@intrinsic
def _store_release(typingctx, addr, value):
    """``*(int64 *) addr = value`` as an atomic store with release order: whatever the
    releasing thread did before (its last reads of the buffers) is seen done by a thread
    that sees the value."""
    def codegen(context, builder, signature, args):
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        builder.store_atomic(args[1], ptr, "release", 8)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


@cfunc(types.void(types.CPointer(types.int64)), cache=True, nogil=True)
def batch_release(p):
    """The batch's ``release`` (Arrow calls it once, from any thread, with or without the
    GIL, when the last array over the batch is gone): marks it released and sets the word
    its ``private_data`` points to (the block's ``FLAG``) to 1. No Python runs: the owner
    sees the flag and lets the block and what it points into go (a ctypes callback cost
    ~0.75 µs a batch)."""
    p[_RELEASE] = 0
    _store_release(p[_PRIVATE], 1)


@njit(cache=True, nogil=True)
def fill_views_batch(block, table, body_views, prop_views, span, list_off, str_off, strs,
                     n_strs, release, child):
    """Write into ``block`` (``WORDS`` int64) the ``ArrowArray`` of a record batch of
    ``table.shape[1]`` rows over the views table ``table``, the ``binary_view`` views
    ``body_views`` / ``prop_views`` (4 int32 a row) pointing into ``span``, and the keys:
    ``list_off`` (rows + 1 int32: each row's first key), the ``n_strs`` keys' int32
    offsets ``str_off`` into their bytes ``strs`` (all zeros and 0 keys: none). ``release`` is the
    batch's release function's address (``batch_release.address``; its ``private_data`` is
    the address of the block's ``FLAG`` word), ``child`` the columns'
    (``child_release.address``). Returns the block's address (the ``ArrowArray*`` to
    import)."""
    return _fill(block, table.shape[1], table.ctypes.data, body_views.ctypes.data,
                 prop_views.ctypes.data, span.ctypes.data, len(span), list_off.ctypes.data,
                 str_off.ctypes.data, strs.ctypes.data, n_strs, release, child)


@njit(cache=True, nogil=True, inline="always")
def _fill(block, n, t, body_views, prop_views, s0, span_len, list_off, str_off, strs, n_strs,
          release, child):
    """``fill_views_batch`` over addresses: the views table at ``t`` (rows ``n`` apart), the
    views at ``body_views`` / ``prop_views``, the span at ``s0`` (``span_len`` bytes), the
    keys' buffers at ``list_off``, ``str_off``, ``strs``."""
    b = block.ctypes.data
    block[:] = 0
    at = _BUFFERS
    for s in range(_STRUCTS):
        o = s * _W
        block[o + _LENGTH] = n_strs if s == _STRUCTS - 1 else n
        block[o + _N_BUF] = _N_BUFFERS[s]
        block[o + _BUF] = b + 8 * at
        block[o + _RELEASE] = release if s == 0 else child
        at += _N_BUFFERS[s]
    block[_PRIVATE] = b + 8 * FLAG
    block[_N_CHILD] = 7
    block[_CHILD] = b + 8 * _CHILDREN
    for c in range(7):
        block[_CHILDREN + c] = b + 8 * _W * (c + 1)
    block[6 * _W + _N_CHILD] = 1
    block[6 * _W + _CHILD] = b + 8 * (_CHILDREN + 7)
    block[_CHILDREN + 7] = b + 8 * _W * 8
    block[_SIZES] = span_len
    at = _BUFFERS + 1                  # (each list's first address: no validity bitmap)
    for r in range(4):
        block[at + 1] = t + 8 * n * _INT_ROWS[r]
        at += 2
    block[at + 1] = body_views
    block[at + 2] = s0
    block[at + 3] = b + 8 * _SIZES
    block[at + 5] = list_off           # the keys' lists (struct 6 follows the bodies)
    at += 6
    block[at + 1] = prop_views
    block[at + 2] = s0
    block[at + 3] = b + 8 * _SIZES
    at += 4
    block[at + 1] = str_off            # the keys' strings: offsets and bytes
    block[at + 2] = strs
    return b


def call_words(n: int) -> int:
    """The int64 words of ``get_columns``' one buffer for ``n`` records (``read_batch``,
    ``fill_read``): the batch's structs (``WORDS``), the views table (``VIEW_FIELDS`` rows of
    ``n``), the two rows of views (``4 n`` words), the empty key lists' int32 offsets
    (``n + 1``, zeros) and each record's place in the span (``n``: the pass's scratch)."""
    return WORDS + (VIEW_FIELDS + 5) * n + (n + 2) // 2


def views_parts(out, n):
    """``out``'s (``call_words(n)`` int64) views table (``VIEW_FIELDS`` × n int64), views
    (2 × 4n int32) and the words where the views and the key lists' offsets start. One
    definition for both callers: ``read_batch`` (compiled, ``_parts``) and ``arrow_read``
    (numpy, for the reads that finish in Python)."""
    v0 = WORDS + VIEW_FIELDS * n
    z0 = v0 + 4 * n
    table = out[WORDS:v0].reshape((VIEW_FIELDS, n))
    views = out[v0:z0].view(np.int32).reshape((2, 4 * n))
    return table, views, v0, z0


_parts = njit(cache=True, nogil=True, inline="always")(views_parts)


@njit(cache=True, nogil=True)
def read_batch(out, data, units, at, n, delta, limit, crc, topic, queue_id, first_offset,
               release, child):
    """``get_columns``' usual read in ONE compiled call: the ``n`` consume-queue units at byte
    ``at`` of ``units`` (the consume-queue file's map, read in place) read by
    ``view_kernels.in_place`` over ``data`` (a segment's map; a record's position in it is
    its offset less ``delta``; readable below ``limit``) into ``out`` (``call_words(n)``
    int64), then, without properties, the batch's structs written over it (``fill_read``).
    Returns ``out``'s address (the ``ArrowArray*`` to import; ``release`` /``child`` as
    ``fill_views_batch``), or: 0 if some record is not as it must be, -2 if the records do
    not lie back to back in ``data`` (the caller copies them: ``views_at``), -3 if they have
    properties (the views table and views are written; ``out[START]``, ``out[OWN]``,
    ``out[PROPS]``: where the span starts in ``data``, its length, the bytes of properties:
    the caller finds the keys and writes the structs, ``fill_views_batch``)."""
    table, views, v0, z0 = _parts(out, n)
    good, props, start, own = in_place(data, units, at, n, delta, limit, crc, topic, queue_id,
                                       first_offset, table, views, out[z0 + (n + 2) // 2:])
    if good < n:
        return np.int64(-2 if good == -2 else 0)
    if props:
        out[START] = start
        out[OWN] = own
        out[PROPS] = props
        return np.int64(-3)
    return np.int64(_fill_read(out, n, data.ctypes.data + start, own, release, child))


@njit(cache=True, nogil=True, inline="always")
def _fill_read(out, n, s0, own, release, child):
    """``fill_read`` over the span's address ``s0``."""
    _table, _views, v0, z0 = _parts(out, n)
    out[z0:z0 + (n + 2) // 2] = 0
    o = out.ctypes.data
    z = o + 8 * z0
    return _fill(out[:WORDS], n, o + 8 * WORDS, o + 8 * v0, o + 8 * v0 + 16 * n, s0, own,
                 z, z, z, 0, release, child)


@njit(cache=True, nogil=True)
def fill_read(out, n, span, start, own, release, child):
    """``fill_views_batch`` for a read without properties (so without keys) whose views table
    and views ``view_kernels.views_at`` wrote into ``out`` (``call_words(n)`` int64: the
    structs, the table, the views, then the key lists' offsets, zeroed here), over the ``own``
    bytes at ``start`` of ``span`` (the segment's map read in place, or the copy at 0).
    Returns ``out``'s address: the ``ArrowArray*`` to import."""
    return _fill_read(out, n, span.ctypes.data + start, own, release, child)


@njit(cache=True, nogil=True)
def key_lists(data, starts, ends):
    """The keys of every record (without its unique key) as ``list<string>`` buffers, found
    in the properties sections ``data[starts[i]:ends[i]]`` by
    ``property_kernels.scan_properties``, in one compiled call: (ok, the lists' int32
    offsets, the strings' int64 offsets, their bytes); ok False if some section does not
    parse (the caller then reads the messages in Python, which says what is wrong)."""
    n = len(starts)
    cap = 1
    for i in range(n):
        cap += (ends[i] - starts[i]) // 8
    tags = np.empty(n, np.int64)
    k_row, k_hash = np.empty(cap, np.int64), np.empty(cap, np.int64)
    k_at, k_end = np.empty(cap, np.int64), np.empty(cap, np.int64)
    k_uniq = np.empty(cap, np.uint8)
    list_off = np.zeros(n + 1, np.int32)
    m = scan_properties(data, starts, starts, ends, tags, k_row, k_hash, k_at, k_end, k_uniq)
    if m < 0:
        return False, list_off, np.zeros(1, np.int64), np.empty(0, np.uint8)
    kept = 0
    size = 0
    for k in range(m):
        if k_uniq[k] == 0:
            kept += 1
            size += k_end[k] - k_at[k]
            list_off[k_row[k] + 1] += 1
    for i in range(n):
        list_off[i + 1] += list_off[i]
    val_off = np.zeros(kept + 1, np.int64)
    values = np.empty(size, np.uint8)
    j = 0
    for k in range(m):     # items come record by record: the strings in the lists' order
        if k_uniq[k] == 0:
            ln = k_end[k] - k_at[k]
            memcpy(values.ctypes.data + val_off[j], data.ctypes.data + k_at[k], ln)
            val_off[j + 1] = val_off[j] + ln
            j += 1
    return True, list_off, val_off, values
