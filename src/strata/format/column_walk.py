"""``put_columns``' Python-sequence columns (keys, tags, properties) read by ONE compiled walk
over the Python objects, as ``object_gather`` reads a batch of ``Message``s.

Why: given as Python lists (a list of key lists, a list of tag strs, a list of dicts), the
columns were gathered by C-speed passes (``str.join`` over chained iterators, encode, a
compiled split, ``count``, ``fromiter``), each walking the objects again: about twice the
time ``put_batch`` spends on the same values as Messages. Here each object is read once and
its ASCII text copied straight into the columns (properties as the record's entries).

Anything unusual — a non-ASCII or NUL-holding str, bytes items, a container or value of
another type, a dict subclass, an empty or reserved property name, columns of another length
— makes ``walk_lists`` return None and the caller takes its general path
(``columns.keys_column`` and friends), which handles or names it. The layout facts are
``object_gather``'s (checked by its probe: ``USABLE``). The kernel holds the GIL: it reads
live objects, which the caller's lists keep alive. The columns returned are views into this
thread's scratch buffers (``object_gather``'s), to be encoded before its next walk.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format import columns as col
from strata.format.object_gather import (_ITEMS_AT, _KINDS, _SCRATCH, _SIZE_AT, FULL,
                                         UNUSUAL, USABLE, _dict_next, _entry, _i64, _reserved,
                                         _text)


@njit(cache=True)
def gather_lists(keys, tags, props, n, kinds, pos, key_data, key_off, key_groups, tag_data,
                 tag_off, prop_data, prop_off):
    """Walk the lists at addresses ``keys``, ``tags`` and ``props`` (0: not given), ``n``
    items each: message ``i``'s keys (None, one str, or a list or tuple of strs) into
    (``key_data``, ``key_off``) with ``key_groups``, its tag (None or a str) into
    (``tag_data``, ``tag_off``), its properties (None or a dict of str to str) as the record's
    entries into (``prop_data``, ``prop_off``). ``kinds``: ``object_gather._KINDS``' addresses;
    ``pos``: 3 int64 for PyDict_Next. Returns the number of keys, or ``-1 - code`` (UNUSUAL:
    take the general path, FULL: a buffer is too small)."""
    none, str_t, tuple_t, list_t, dict_t = kinds[0], kinds[2], kinds[3], kinds[4], kinds[5]
    pos_at = pos.ctypes.data
    k_items = _i64(keys + _ITEMS_AT) if keys != 0 else 0
    t_items = _i64(tags + _ITEMS_AT) if tags != 0 else 0
    p_items = _i64(props + _ITEMS_AT) if props != 0 else 0
    nk = kb = tb = pb = 0
    key_off[0] = tag_off[0] = prop_off[0] = key_groups[0] = 0
    for i in range(n):
        if keys != 0:
            k = _i64(k_items + 8 * i)
            if k != none:
                kt = _i64(k + 8)
                if kt == str_t:         # one key
                    count = 1
                    arr = 0
                elif kt == tuple_t:
                    count = _i64(k + _SIZE_AT)
                    arr = k + _ITEMS_AT
                elif kt == list_t:
                    count = _i64(k + _SIZE_AT)
                    arr = _i64(k + _ITEMS_AT)
                else:
                    return -1 - UNUSUAL
                for j in range(count):
                    if nk + 1 >= len(key_off):
                        return -1 - FULL
                    end = _text(k if arr == 0 else _i64(arr + 8 * j), str_t, key_data, kb, 0)
                    if end < 0:
                        return -1 + end
                    kb = end
                    nk += 1
                    key_off[nk] = kb
        key_groups[i + 1] = nk
        if tags != 0:
            t = _i64(t_items + 8 * i)
            if t != none:
                end = _text(t, str_t, tag_data, tb, 0)
                if end < 0:
                    return -1 + end
                tb = end
        tag_off[i + 1] = tb
        if props != 0:
            p = _i64(p_items + 8 * i)
            if p != none:
                if _i64(p + 8) != dict_t:
                    return -1 - UNUSUAL
                pos[0] = 0
                while _dict_next(p, pos_at, pos_at + 8, pos_at + 16):
                    end = _entry(_i64(pos_at + 8), str_t, prop_data, pb, 1)  # a name: not empty
                    if end < 0:
                        return -1 + end
                    if _reserved(prop_data, pb + 2, end):
                        return -1 - UNUSUAL
                    end = _entry(_i64(pos_at + 16), str_t, prop_data, end, 0)
                    if end < 0:
                        return -1 + end
                    pb = end
        prop_off[i + 1] = pb
    return nk


def walk_lists(keys, tags, properties, n: int
               ) -> tuple[col.BytesColumn | None, np.ndarray | None, col.BytesColumn | None,
                          col.BytesColumn | None] | None:
    """``(keys, key groups, tags, properties)`` columns of ``n`` messages, as
    ``columns.keys_column``, ``as_column`` and ``properties_column`` give them (None where
    the argument was None), read by one compiled walk; None when the walk cannot take them
    (an argument not a list or tuple of ``n`` items, or a value unusual in the sense of the
    module's docstring)."""
    given = [c for c in (keys, tags, properties) if c is not None]
    if not USABLE or not n or not given or \
            any(type(c) not in (list, tuple) or len(c) != n for c in given):
        return None
    keys, tags, properties = (c if c is None or type(c) is list else list(c)
                              for c in (keys, tags, properties))
    sc = _SCRATCH
    while True:
        bufs = sc.buffers(n)
        key_data, key_off, key_groups, tag_data, tag_off, prop_data, prop_off = bufs[:7]
        nk = gather_lists(0 if keys is None else id(keys), 0 if tags is None else id(tags),
                          0 if properties is None else id(properties), n, _KINDS,
                          sc.dict_pos, key_data, key_off, key_groups, tag_data, tag_off,
                          prop_data, prop_off)
        if nk != -1 - FULL:
            break
        sc.grow()
    if nk < 0:
        return None
    key_col = groups = tag_col = prop_col = None
    if keys is not None:
        key_col = col.BytesColumn.trusted(key_data, key_off[:nk + 1])
        groups = key_groups[:n + 1]
    if tags is not None:
        tag_col = col.BytesColumn.trusted(tag_data, tag_off[:n + 1])
    if properties is not None:
        prop_col = col.BytesColumn.trusted(prop_data, prop_off[:n + 1])
    return key_col, groups, tag_col, prop_col
