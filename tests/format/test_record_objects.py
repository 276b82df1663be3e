"""Messages made in compiled code (strata.format.record_objects, through MessageBatch) are the
messages the one-record decoder makes: the eager ones (``MessageBatch.made``) of the same type
and field types, the lazy ``BatchMessage``s of a batch read equal to them in every field,
indexed, iterated, hashed, pickled and compared alike; values shared only where equal; no
reference leaked or lost; and the Python maker takes over if the compiled one cannot make an
object."""

from __future__ import annotations

import gc
import pickle
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from strata.format import record as rec
from strata.format import record_objects as ro
from strata.format import record_kernels as rk
from strata.format.batch_message import BatchMessage
from strata.format.record_batch import MessageBatch

from test_record_format import records

BASE = 1000   # the commit-log offset of byte 0 of the test buffers


def laid_out(kws: list[dict]) -> tuple[bytes, np.ndarray]:
    """The records of ``kws`` back to back from byte 16 of a buffer, and their field table
    (filled by the compiled walk, as a scan fills it)."""
    buf = bytearray(16)
    for kw in kws:
        kw = dict(kw, physical_offset=BASE + len(buf))
        buf += rec.encode_record(**kw)
    data = np.frombuffer(bytes(buf), np.uint8)
    fields = np.zeros((rk.FIELDS, len(kws)), np.int64)
    n, _stop, why = rk.walk(data, 16, len(buf), BASE, 16, fields, 0, len(kws))
    assert (n, why) == (len(kws), rk.WALK_END)
    return bytes(buf), fields


def decoded(buf: bytes, fields: np.ndarray) -> list[rec.StoredMessage]:
    return [rec.decode_record(buf, int(p) - rec.HEADER_SIZE) for p in fields[rk.F_HOSTS_AT]]


def same_values(a: rec.StoredMessage, b: rec.StoredMessage) -> bool:
    return type(a) is type(b) and tuple(a) == tuple(b) and \
        [type(x) for x in a] == [type(x) for x in b]


def same_message(g: rec.StoredMessage, w: rec.StoredMessage) -> bool:
    """``g`` (a BatchMessage) stands for ``w`` (a decoded StoredMessage) in every respect."""
    return type(g) is BatchMessage and isinstance(g, rec.StoredMessage) and \
        same_values(g.stored(), w) and len(g) == len(w) and list(g) == list(w) and \
        [g[i] for i in range(-14, 14)] == [w[i] for i in range(-14, 14)] and g[1:5] == w[1:5] \
        and all(getattr(g, f) == getattr(w, f) and type(getattr(g, f)) is type(getattr(w, f))
                for f in rec.StoredMessage.FIELDS) and repr(g) == repr(w)


def made(buf: bytes, fields: np.ndarray, topic, topics) -> list[rec.StoredMessage]:
    return list(MessageBatch.made(buf, fields, topic, topics))


# Runs of records that repeat some values (one producer's hosts, one topic, plain
# properties, timestamps of one batch) and change others, so both the shared and the fresh
# paths of the maker are taken.
@st.composite
def runs(draw):
    kws = draw(st.lists(records(), min_size=1, max_size=6))
    out = []
    for _ in range(draw(st.integers(1, 12))):
        kw = dict(draw(st.sampled_from(kws)))
        if out and draw(st.booleans()):
            prev = out[-1]
            for k in draw(st.lists(st.sampled_from(
                    ["topic", "born_host", "store_host", "properties", "keys", "tags",
                     "born_ts", "store_ts", "queue_id", "sys_flag", "body"]), max_size=6)):
                kw[k] = prev[k]
        out.append(kw)
    return out


@settings(max_examples=200, deadline=None)
@given(runs(), st.booleans())
def test_compiled_messages_are_the_decoded_ones(kws, known_topic):
    buf, fields = laid_out(kws)
    want = decoded(buf, fields)
    topics: dict[bytes, str] = {}
    topic = want[0].topic if known_topic and len({m.topic for m in want}) == 1 else None
    batch = MessageBatch(buf, fields, topic, topics)
    got = list(batch)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert same_message(g, w)
        assert g == w and w == g and not g != w and not w != g and hash(g) == hash(w)
        assert g <= w and w >= g and not g < w and g == tuple(w) and tuple(g) == w
        assert (g.keys, g.tags, g.properties, g.born_host, g.store_host, g.msg_id) == \
            (w.keys, w.tags, w.properties, w.born_host, w.store_host, w.msg_id)
        assert same_values(pickle.loads(pickle.dumps(g)), w)   # a plain StoredMessage again
        assert w.body in g and g.count(w.body) == w.count(w.body)
        assert g.index(w.topic) == w.index(w.topic) and g + (1,) == w + (1,)
        assert (1,) + g == (1,) + w and g + g == w + w and 2 * g == w * 2
        assert tuple(g) == tuple(w) and [*g] == [*w] and list(reversed(g)) == list(reversed(w))
        assert not gc.is_tracked(g)   # str, bytes, int and the rows: no cycle possible
    assert got == want and want == got
    if len(got) > 1:
        assert got[0] != got[1] and (got[0] < got[1]) == (want[0] < want[1])
    # made now (``MessageBatch.made``, as a scan makes them: ``make_scanned``): the same,
    # and the walk's table is left as it was
    table = fields.copy()
    for g, w in zip(made(buf, fields, topic, dict(topics)), want):
        assert same_message(g, w) and g == w and hash(g) == hash(w)
        assert same_values(pickle.loads(pickle.dumps(g)), w)
        assert not gc.is_tracked(g)
    assert (fields == table).all()
    # single messages are made alone
    for i in (0, len(want) - 1, -1):
        assert same_message(MessageBatch(buf, fields, topic, {})[i], want[i])
    if topic is None:   # the topics met were learnt, each name made once
        assert topics == {m.topic.encode(): m.topic for m in want}
        assert all(g.topic is topics[g.topic.encode()] for g in got)


def test_a_message_holds_its_topic_and_body_and_reads_the_rest_from_its_batch():
    kw = dict(queue_id=1, flag=0, queue_offset=10**12, physical_offset=0, sys_flag=0,
              born_ts=1_700_000_000_000, store_ts=1_700_000_000_001, tx_offset=0, reconsume=0,
              born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 2), topic="t",
              properties={"a": "b"}, body=b"x" * 300)
    kws = [dict(kw, queue_offset=10**12 + i) for i in range(4)]
    kws[2]["properties"] = {"a": "c"}
    kws[3]["born_host"] = ("10.0.0.9", 1)
    buf, fields = laid_out(kws)
    for m in (list(MessageBatch(buf, fields, None, {})), made(buf, fields, None, {})):
        assert tuple.__len__(m[0]) == BatchMessage.WIDTH   # its own items: 4, not 14
        assert m[0]._rows is m[3]._rows and m[0].topic is m[3].topic
        assert m[0].body is not m[1].body and m[0].body == m[1].body   # one bytes per body
        assert m[0]._rows.cols[rk.F_STORE_TS] is None     # a row becomes a list when read
        assert m[0].store_timestamp == m[3].store_timestamp == 1_700_000_000_001
        assert m[0]._rows.cols[rk.F_STORE_TS] == [1_700_000_000_001] * 4
        assert [x.queue_offset for x in m] == [10**12 + i for i in range(4)]
        assert m[2].properties_raw != m[1].properties_raw == m[0].properties_raw
        assert m[3].properties == {"a": "b"} and m[2].properties == {"a": "c"}
        assert m[0].hosts_raw == m[2].hosts_raw != m[3].hosts_raw
        assert m[3].born_host == ("10.0.0.9", 1) and m[0].store_host == ("10.0.0.2", 2)
    # made now: the hosts, topic and properties were copied into a buffer of their own
    # (the bodies are not in it), so the buffer they were made from may go
    m = made(buf, fields, None, {})
    assert len(m[0]._rows.buf) == int((fields[rk.F_BODY_AT] - fields[rk.F_HOSTS_AT]).sum())
    assert m[0]._rows.buf is not buf and m == decoded(buf, fields)


def test_no_reference_is_leaked_or_lost():
    kws = [dict(queue_id=i % 3, flag=0, queue_offset=10**10 + i, physical_offset=0,
                sys_flag=0, born_ts=10**12 + i // 4, store_ts=10**12, tx_offset=0,
                reconsume=0, born_host=("10.0.0.1", 1 + i % 2), store_host=("::1", 2),
                topic=("ta", "tbb", "ta")[i % 3], properties={"k": str(i % 2)},
                body=bytes([i % 256]) * (i % 50)) for i in range(300)]
    buf, fields = laid_out(kws)
    topic = "given"
    topics: dict[bytes, str] = {}
    list(MessageBatch(buf, fields, None, topics))   # learn the names, warm the compiled code
    made(buf, fields, None, topics)
    counts = (sys.getrefcount(topic), [sys.getrefcount(v) for v in topics.values()],
              sys.getrefcount(rec.StoredMessage), sys.getrefcount(BatchMessage),
              [sys.getrefcount(i) for i in ro._COLUMN_INTS[257:300]])  # (< 257: shared)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(100):
            kept = list(MessageBatch(buf, fields, None, topics))
            kept += list(MessageBatch(buf, fields, topic, topics))
            kept += made(buf, fields, None, topics) + made(buf, fields, topic, topics)
            assert len(kept) == 1200
            assert [m.queue_offset for m in kept[:600]] == [m.queue_offset for m in kept[600:]]
        del kept
        gc.collect()
        held = ro.free_list_held()   # messages' memory kept for the next ones (bounded) ...
        assert 0 < held <= ro.FREE_CAP
        ro.release_free_list()       # ... given back: what is left would be a leak
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown    # 120,000 messages made and dropped
    assert counts == (sys.getrefcount(topic), [sys.getrefcount(v) for v in topics.values()],
                      sys.getrefcount(rec.StoredMessage), sys.getrefcount(BatchMessage),
                      [sys.getrefcount(i) for i in ro._COLUMN_INTS[257:300]])


def test_the_python_maker_takes_over_if_an_object_cannot_be_made(monkeypatch):
    kws = [dict(queue_id=0, flag=0, queue_offset=i, physical_offset=0, sys_flag=0, born_ts=i,
                store_ts=i, tx_offset=0, reconsume=0, born_host=("10.0.0.1", 1),
                store_host=("10.0.0.2", 2), topic="t", body=b"b%d" % i) for i in range(5)]
    buf, fields = laid_out(kws)
    monkeypatch.setattr(ro, "make_lazy", lambda *args: -1)
    monkeypatch.setattr(ro, "make_lazy_within", lambda *args: -1)
    monkeypatch.setattr(ro, "make_scanned", lambda *args: -1)   # (it calls the compiled one)
    want = decoded(buf, fields)
    for got in (list(MessageBatch(buf, fields, None, {})), made(buf, fields, None, {}),
                list(MessageBatch(buf, fields, "t", {}))):
        assert len(got) == 5 and all(same_message(g, w) for g, w in zip(got, want))


def test_columns_past_the_cache_of_ints_are_made(monkeypatch):
    kws = [dict(queue_id=0, flag=0, queue_offset=i, physical_offset=0, sys_flag=0, born_ts=i,
                store_ts=i, tx_offset=0, reconsume=0, born_host=("10.0.0.1", 1),
                store_host=("10.0.0.2", 2), topic="t", body=b"b%d" % i) for i in range(3)]
    buf, fields = laid_out(kws)
    wide = np.repeat(fields, 3000, axis=1)    # columns 0 .. 8999, the same 3 records
    n = 5000
    monkeypatch.setattr(ro, "COLUMN_CACHE", n)
    assert len(ro.column_ids(9000)) == n
    got = MessageBatch(buf, wide, "t")[n - 1:n + 3]
    assert [m._column for m in got] == [n - 1, n, n + 1, n + 2]
    assert got[0]._column is ro._COLUMN_INTS[n - 1]       # cached; the others their own
    assert got == decoded(buf, wide[:, n - 1:n + 3])


@pytest.mark.parametrize("n", [0, 1, 2])
def test_short_batches(n):
    kws = [dict(queue_id=0, flag=0, queue_offset=i, physical_offset=0, sys_flag=0, born_ts=0,
                store_ts=0, tx_offset=0, reconsume=0, born_host=("10.0.0.1", 1),
                store_host=("10.0.0.2", 2), topic="t", body=b"") for i in range(n)]
    if n == 0:
        assert list(MessageBatch(b"", np.zeros((rk.FIELDS, 0), np.int64), None)) == []
        return
    buf, fields = laid_out(kws)
    assert list(MessageBatch(buf, fields, None, {})) == decoded(buf, fields)
    assert made(buf, fields, None, {}) == decoded(buf, fields)


def test_a_table_pointing_outside_its_buffer_is_refused():
    kws = [dict(queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0, born_ts=0,
                store_ts=0, tx_offset=0, reconsume=0, born_host=("10.0.0.1", 1),
                store_host=("10.0.0.2", 2), topic="t", body=b"abc")]
    buf, fields = laid_out(kws)
    with pytest.raises(ValueError, match="outside"):
        list(MessageBatch(buf[:-10], fields, None, {}))   # the compiled code never reads past
    with pytest.raises(ValueError, match="outside"):
        made(buf[:-10], fields, None, {})


@pytest.mark.parametrize("direct", [1, 0])
def test_messages_made_with_or_without_the_collector_are_alike(monkeypatch, direct):
    """``make_lazy`` makes its tuples directly (no collector bookkeeping) where the layout
    check passes — as it does on the interpreter this project runs on — else through
    PyType_GenericAlloc; either way untracked, equal and freed."""
    assert ro.direct_ok() and ro.DIRECT == 1
    monkeypatch.setattr(ro, "DIRECT", direct)
    if not direct:   # as in a process whose layout check failed: no free list
        ro.release_free_list(keep=False)
    try:
        _made_alike(direct)
    finally:
        ro.keep_free_list()


def _made_alike(direct: int) -> None:
    kws = [dict(queue_id=0, flag=0, queue_offset=i, physical_offset=0, sys_flag=0, born_ts=i,
                store_ts=i, tx_offset=0, reconsume=0, born_host=("10.0.0.1", 1),
                store_host=("10.0.0.2", 2), topic="t", body=b"b%d" % i) for i in range(800)]
    buf, fields = laid_out(kws)
    types_refs = sys.getrefcount(BatchMessage)
    gc.collect()
    gc.disable()   # (counting goes on; no collection resets the count meanwhile)
    try:
        young = gc.get_count()[0]
        got = list(MessageBatch(buf, fields, "t"))
    finally:
        gc.enable()
    # the collector counted the 800 new messages only when made through it
    assert (gc.get_count()[0] - young >= 800) == (direct == 0)
    assert got == decoded(buf, fields) and not any(map(gc.is_tracked, got))
    assert sys.getrefcount(BatchMessage) == types_refs + 800
    del got
    assert sys.getrefcount(BatchMessage) == types_refs


def test_batch_message_items_are_read_only_slots_of_the_tuple():
    """``topic``, ``body`` and the message's rows and column are member descriptors over the
    tuple's items (what the interpreter reads at a fixed offset): they read the items the
    message was made with, and can be neither set nor deleted."""
    from strata.format.batch_message import BatchRows

    rows = BatchRows(b"", np.zeros((rk.FIELDS, 1), np.int64))
    body = b"a body"
    m = BatchMessage.of("topic-x", body, rows, 7)
    assert (m.topic, m.body, m._rows, m._column) == ("topic-x", body, rows, 7)
    assert m.body is tuple.__getitem__(m, 1) and m._rows is rows
    for name in ("topic", "body", "_rows", "_column"):
        assert type(BatchMessage.__dict__[name]).__name__ == "member_descriptor"
        with pytest.raises(AttributeError):
            setattr(m, name, b"other")
        with pytest.raises(AttributeError):
            delattr(m, name)
    assert (m.topic, m.body) == ("topic-x", body)


def test_bodies_made_directly_are_whole_bytes_objects():
    """``new_body`` (bodies made without PyBytes_FromStringAndSize): of every length, equal to
    the bytes they were copied from, hashed and compared as bytes, NUL-terminated as CPython
    keeps them, the 0- and 1-byte ones CPython's shared objects; freed with their message
    (the compiled dealloc frees a body nobody else holds) or kept by whoever holds them."""
    from strata.format.batch_message import BatchRows

    sizes = [0, 1, 2, 7, 8, 100, 4096, 70000]
    buf = bytes(range(256)) * (sum(sizes) // 256 + 1)
    fields = np.zeros((rk.FIELDS, len(sizes)), np.int64)
    fields[rk.F_BODY_AT] = np.cumsum([0] + sizes[:-1])
    fields[rk.F_BODY_END] = fields[rk.F_BODY_AT] + sizes
    want = [buf[a:b] for a, b in zip(fields[rk.F_BODY_AT].tolist(),
                                     fields[rk.F_BODY_END].tolist())]
    data = np.frombuffer(buf, np.uint8)
    out = [None] * len(sizes)
    assert ro.make_bodies(data.ctypes.data, fields, 0, len(sizes), id(out)) == len(sizes)
    assert out == want and all(type(b) is bytes for b in out)
    assert [hash(b) for b in out] == [hash(w) for w in want] and {out[5]: 1}[want[5]] == 1
    assert out[0] is bytes() and out[1] is bytes([buf[0]])
    assert all(ctypes_nul(b) for b in out[2:])
    rows = BatchRows(buf, fields)
    ms = [None] * len(sizes)
    assert ro.make_lazy(data.ctypes.data, fields, 0, len(sizes), id(BatchMessage), id("t"), 0,
                        id(rows), ro.column_ids(len(sizes)), id(ms), ro.DIRECT) == len(sizes)
    kept = ms[6].body
    refs = sys.getrefcount(kept)
    assert [m.body for m in ms] == want
    del ms
    assert sys.getrefcount(kept) == refs - 1 and kept == want[6]   # the message's ref only


def ctypes_nul(b: bytes) -> bool:
    """Whether the byte after ``b``'s last is NUL (CPython's bytes always end so)."""
    import ctypes
    return ctypes.string_at(id(b) + ro.BYTES_DATA_AT + len(b), 1) == b"\0"
