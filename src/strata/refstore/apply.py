"""The server thread's application of queued ops to the ref store's state: writes (append
to the current file, or take another reference), removes (drop a reference) and contains
calls. Run under the store's lock on its server thread (``RefStore._apply``); functions of
the store, moved out of ``store.py`` as they were (``self`` became ``st``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crc32c import crc32c

from strata.format import refstore_record as rec

from .client import StoreClient
from .index import FILE, OFFSET, REF, SIZE
from .model import _Reply

if TYPE_CHECKING:
    from .store import RefStore

_ALL_TRUE = object()   # marker: no write of the batch was cancelled

# op codes on the server queue
OP_WRITE, OP_REMOVE, OP_CONTAINS, OP_TERMINATE, OP_DYING, OP_DELETE, OP_SYNC = range(7)


def apply_writes(st: "RefStore", client: StoreClient, ids: list, bodies: list) -> None:
    """A client's batch of writes: skip those a flying remove cancelled, take another
    reference where the message is stored, else append it to the current file."""
    applies = st._flying.server_write_many(client.ref, ids)
    index = st._index
    index.prefetch(ids)
    mark = client.dying_mark
    confirms = st._want_confirm(client)
    if applies is None:
        applies = _ALL_TRUE
    cache = st._cache._d
    cache_bytes = 0
    files = st._summary.files
    summary = st._summary
    limit = st.file_size_limit
    cur = st._cur
    cur_info = files[cur.number]
    number = cur.number
    buf = cur.buffer
    d = index._d
    get = index.get if index._base_left else d.get
    pack_head = rec.HEADER.pack
    pack_trailer = rec.TRAILER.pack
    added = 0
    k = -1
    for m, b in zip(ids, bodies):
        k += 1
        if applies is not _ALL_TRUE and not applies[k]:
            st.writes_eliminated += 1
        else:
            e = get(m)
            if mark is not None and (e is None or (e[FILE], e[OFFSET]) >= mark):
                st.writes_ignored += 1
            elif e is not None and e[REF] > 0:
                e[REF] += 1
            else:
                if e is not None:            # kept at ref 0 for a late fan-out write
                    info = files.get(e[FILE])
                    if info is not None and not info.locked:
                        e[REF] = 1
                        info.valid += e[SIZE]
                        summary.sum_valid += e[SIZE]
                        e = True
                    else:
                        index.delete(m)      # its copy is being collected: write again
                        e = None
                if e is None:
                    n = len(b)
                    total = n + 25
                    off = cur.size
                    if off + total > limit and off > 0:
                        cur_info.valid += added
                        cur_info.size += added
                        summary.sum_valid += added
                        summary.sum_size += added
                        added = 0
                        st._roll()
                        cur = st._cur
                        cur_info = files[cur.number]
                        number = cur.number
                        buf = cur.buffer
                        off = 0
                    head = pack_head(n + 16, m)
                    buf += head
                    buf += b
                    buf += pack_trailer(crc32c(b, crc32c(head)), 0xFF)
                    cur.size = off + total
                    d[m] = [1, number, off, total]
                    added += total
                    if len(buf) >= cur.buffer_limit:
                        cur.flush()
                        buf = cur.buffer
        ce = cache[m]
        if ce[1] == 1:
            del cache[m]
            cache_bytes += len(ce[0])
        else:
            ce[1] -= 1
        if confirms is not None:
            confirms.add(m)
    cur_info.valid += added
    cur_info.size += added
    summary.sum_valid += added
    summary.sum_size += added
    st._cache.bytes -= cache_bytes

def apply_removes(st: "RefStore", client: StoreClient, ids: list) -> None:
    """A client's removes: drop one reference each (parked while the GC holds the file)."""
    get = st._index.get
    files = st._summary.files
    summary = st._summary
    mark = client.dying_mark
    cur_number = st._cur.number
    emptied = False
    for m in ids:
        e = get(m)
        if e is None or e[REF] == 0:
            if mark is None:
                st.removes_ignored += 1
            continue
        if mark is not None and (e[FILE], e[OFFSET]) >= mark:
            continue
        info = files[e[FILE]]
        if info.locked:
            st._parked.append((info.number, (OP_REMOVE, client, [m])))
            continue
        e[REF] -= 1
        if e[REF] == 0:
            info.valid -= e[SIZE]
            summary.sum_valid -= e[SIZE]
            if info.valid == 0 and info.number != cur_number:
                emptied = True
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
