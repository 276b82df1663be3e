"""The server thread's application of queued ops to the ref store's state: writes (append
to the current file, or take another reference), removes (drop a reference) and contains
calls. Run under the store's lock on its server thread (``RefStore._apply``); functions of
the store, moved out of ``store.py`` as they were (``self`` became ``st``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from strata.format import refstore_record as rec

from . import append, encode
from . import hash_kernels as hk
from .client import StoreClient
from .index import FILE, OFFSET, REF, SIZE, keys_of
from .model import _Reply

if TYPE_CHECKING:
    from .store import RefStore

# below this many messages the batch path's fixed cost (numpy set-up, one compiled call: about
# 15 us) is more than it saves (about 1 us a message): single writes go one by one
BATCH_PATH_MIN = 16

# op codes on the server queue
OP_WRITE, OP_REMOVE, OP_CONTAINS, OP_TERMINATE, OP_DYING, OP_DELETE, OP_SYNC = range(7)


def apply_writes(st: "RefStore", client: StoreClient, ids: list, bodies: list,
                 nbytes: int) -> None:
    """A client's batch of writes: skip those a flying remove cancelled, take another
    reference where the message is stored, else append it to the current file.

    A batch of ids the store has never seen (the common case) takes the batch path
    (``_append_in_place``: one compiled call per file it lands in, which enters the ids in
    the index and encodes their records; ``_append_new`` where the bodies cannot be read in
    place: one compiled index insert, one compiled encoding per file);
    a batch of ids all stored (a fan-out write) is one compiled count update. Anything else
    goes message by message."""
    applies = st._flying.server_write_many(client.ref, ids)
    index = st._index
    index.prefetch(ids)
    confirms = st._want_confirm(client)
    batched = False
    if applies is None and client.dying_mark is None and len(ids) >= BATCH_PATH_MIN:
        ids_raw = None            # the ids joined, made once if a path needs them
        if append.IN_PLACE:
            batched = _append_in_place(st, client, ids, bodies, nbytes)
        else:
            ids_raw = b"".join(ids)
            batched = _append_new(st, ids_raw, bodies)
        if not batched:
            batched = index.incref_known(keys_of(ids_raw or b"".join(ids)))
    if not batched:
        _apply_one_by_one(st, client, ids, bodies, applies)
    st._cache.done_many(ids)
    if confirms is not None:
        confirms.update(ids)


def _apply_one_by_one(st: "RefStore", client: StoreClient, ids: list, bodies: list,
                      applies: list | None) -> None:
    """Writes one at a time (the caller prefetched saved entries of ``ids``): a new id or
    another reference is one compiled call (``MessageIndex.write_one``), given the place
    the record would go; a dying client's writes look their entry up first."""
    index = st._index
    mark = client.dying_mark
    files = st._summary.files
    summary = st._summary
    limit = st.file_size_limit
    write_one = index.write_one
    for k, (m, b) in enumerate(zip(ids, bodies)):
        if applies is not None and not applies[k]:
            st.writes_eliminated += 1
            continue
        total = len(b) + rec.OVERHEAD
        if mark is None:
            cur = st._cur
            roll = cur.size + total > limit and cur.size > 0
            e = write_one(m, cur.number + roll, 0 if roll else cur.size, total)
            if e[0] == 1:            # stored: one more reference
                continue
            if e[0] == 0:            # entered where it is appended now
                if roll:
                    st._roll()
                _append_entered(st, m, b)
                continue
            e = e[1:]                # stored at count 0: (ref, file, offset, size)
        else:
            e = index.get(m)
            if e is None or (e[FILE], e[OFFSET]) >= mark:
                st.writes_ignored += 1
                continue
            if e[REF] > 0:
                index.set_ref(m, e[REF] + 1)
                continue
        info = files.get(e[FILE])    # kept at ref 0 for a late fan-out write
        if info is not None and not info.locked:
            index.set_ref(m, 1)
            info.valid += e[SIZE]
            summary.sum_valid += e[SIZE]
            continue
        if st._cur.size + total > limit and st._cur.size > 0:   # its copy is being
            st._roll()                                          # collected: write again
        index.put(m, (1, st._cur.number, st._cur.size, total))
        _append_entered(st, m, b)


def _append_entered(st: "RefStore", m: bytes, b: bytes) -> None:
    """Append the record whose index entry names the current file's end (no roll due)."""
    cur = st._cur
    _off, total = cur.append(m, b)
    _counted(st, cur.number, total)


def _wrote(st: "RefStore", cur, span: int) -> None:
    """``span`` bytes of new records were put in ``cur``'s buffer: count them there and in the
    summary (live and total)."""
    cur.wrote(span)
    _counted(st, cur.number, span)


def _counted(st: "RefStore", number: int, span: int) -> None:
    """File ``number`` gained ``span`` bytes of live records: the summary counts them."""
    summary = st._summary
    info = summary.files[number]
    info.valid += span
    info.size += span
    summary.sum_valid += span
    summary.sum_size += span


def _append_in_place(st: "RefStore", client: StoreClient, ids: list, bodies: list,
                     nbytes: int) -> bool:
    """Append a batch whose first id is new with one compiled call (``append.append_new``)
    per file it lands in; False (nothing done) if an id of the first file's share is stored
    or comes twice. A later share that meets such an id goes one by one (the earlier shares,
    all new, are appended as they would have been one by one)."""
    n = len(ids)
    limit = st.file_size_limit
    ends = None                  # the records' ends from the batch's start, if needed
    first = done = 0             # the first message not appended, the bytes before it
    while first < n:
        cur = st._cur
        room = limit - cur.size
        if ends is None and nbytes + n * rec.OVERHEAD <= room:
            last, span = n, nbytes + n * rec.OVERHEAD       # the common case: all fits
        else:
            if ends is None:
                ends = np.cumsum(np.fromiter(map(len, bodies), dtype=np.int64, count=n) +
                                 rec.OVERHEAD)
            last = int(np.searchsorted(ends, done + room, side="right"))
            if last == first:
                if cur.size > 0:             # the next record does not fit: next file
                    st._roll()
                    continue
                last = first + 1             # an empty file takes any record
            span = int(ends[last - 1]) - done
        slots, meta = st._index.table_for(last - first)
        pos = cur.reserve(span)
        if append.append_new(slots, meta, id(ids), id(bodies), first, last, cur.buf, pos,
                             cur.number, cur.size) < 0:
            if first == 0:
                return False
            _apply_one_by_one(st, client, ids[first:], bodies[first:], None)
            return True
        _wrote(st, cur, span)
        first = last
        done += span
    return True


def _append_new(st: "RefStore", ids_raw: bytes, bodies: list) -> bool:
    """Append a batch of ids that are all new and distinct; False (nothing done) otherwise.

    Plans where each record goes (rolling to a new file where the next record does not fit),
    enters the batch in the index in one compiled call (which refuses, changing nothing, if
    an id is known or comes twice), then encodes each file's share of the batch with one
    compiled call into the write buffer."""
    n = len(bodies)
    sizes = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    totals = sizes + rec.OVERHEAD
    ends = np.cumsum(totals)
    limit = st.file_size_limit
    cur = st._cur
    number = cur.number
    plan = []                    # (first, last, files rolled before it, offset of first)
    first = rolls = done = 0
    off = cur.size
    while first < n:
        last = int(np.searchsorted(ends, done + limit - off, side="right"))
        if last == first and off > 0:   # the next record does not fit: next file
            rolls += 1
            off = 0
            continue
        last = max(last, first + 1)     # an empty file takes any record
        plan.append((first, last, rolls, off))
        span = int(ends[last - 1]) - done
        done += span
        off += span
        first = last
    offs = ends - totals
    where = np.empty(n, dtype=np.int64)
    for first, last, k, at in plan:
        offs[first:last] += at - offs[first]
        where[first:last] = number + k
    if st._index.insert_new(keys_of(ids_raw), where, offs, totals):
        return False             # an id is stored, or came twice: one by one
    ids_a = np.frombuffer(ids_raw, dtype=np.uint8)
    addrs, alive = encode.body_addresses(bodies, sizes)
    for first, last, k, at in plan:
        if k != st._cur.number - number:
            st._roll()
        cur = st._cur
        span = int(ends[last - 1]) - (int(ends[first - 1]) if first else 0)
        pos = cur.reserve(span)
        encode.encode_records(cur.buf, pos, ids_a, addrs, sizes, first, last)
        _wrote(st, cur, span)
    del alive                    # the bodies (or their join) outlived every encode call
    return True


def apply_removes(st: "RefStore", client: StoreClient, ids: list) -> None:
    """A client's removes: drop one reference each (parked while the GC holds the file).

    A batch of at least ``BATCH_PATH_MIN`` goes through the index in one compiled call; the
    file summary then takes one update per file that lost live bytes."""
    if len(ids) < BATCH_PATH_MIN:
        _remove_one_by_one(st, client, ids)
        return
    index = st._index
    index.prefetch(ids)
    files = st._summary.files
    locked = np.fromiter((k for k, info in files.items() if info.locked), dtype=np.int64)
    status, at_file, freed = index.decref(keys_of(b"".join(ids)), client.dying_mark, locked)
    if client.dying_mark is None:
        st.removes_ignored += int(np.count_nonzero(status == hk.ABSENT))
    for j in np.flatnonzero(status == hk.PARKED).tolist():
        st._parked.append((int(at_file[j]), (OP_REMOVE, client, [ids[j]])))
    gone = np.flatnonzero(freed)
    emptied = False
    if len(gone):
        numbers, which = np.unique(at_file[gone], return_inverse=True)
        lost = np.bincount(which, weights=freed[gone]).astype(np.int64)
        emptied = _lose_live(st, numbers.tolist(), lost.tolist())
    st._maybe_gc(emptied)


def _lose_live(st: "RefStore", numbers: list, sizes: list) -> bool:
    """Take bytes that stopped being live off the summary; True if a file (not the current
    one) has none left."""
    summary = st._summary
    files = summary.files
    cur_number = st._cur.number
    emptied = False
    for number, size in zip(numbers, sizes):
        info = files[number]
        info.valid -= size
        summary.sum_valid -= size
        if info.valid == 0 and number != cur_number:
            emptied = True
    return emptied


def _remove_one_by_one(st: "RefStore", client: StoreClient, ids: list) -> None:
    index = st._index
    get = index.get
    files = st._summary.files
    mark = client.dying_mark
    emptied = False
    ignored = 0
    for m in ids:
        e = get(m)
        if e is None:
            ignored += 1
            continue
        ref, number, off, size = e
        if ref == 0:
            ignored += 1
            continue
        if mark is not None and (number, off) >= mark:
            continue
        if files[number].locked:
            st._parked.append((number, (OP_REMOVE, client, [m])))
            continue
        index.set_ref(m, ref - 1)
        if ref == 1:
            emptied = _lose_live(st, [number], [size]) or emptied
    if mark is None:
        st.removes_ignored += ignored
    st._maybe_gc(emptied)


def apply_contains(st: "RefStore", client: StoreClient, msg_id: bytes,
                   reply: _Reply) -> None:
    """Answer whether ``msg_id`` is stored (parked behind a GC of its file)."""
    e = st._index.get(msg_id)
    if e is None or e[REF] == 0:
        reply.set(False)
        return
    info = st._summary.files[e[FILE]]
    if info.locked:       # a remove parked behind the GC must not be overtaken
        st._parked.append((info.number, (OP_CONTAINS, client, msg_id, reply)))
        return
    reply.set(True)
