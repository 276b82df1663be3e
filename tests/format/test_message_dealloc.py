"""``BatchMessage``'s compiled dealloc (strata.format.message_dealloc): installed on this
interpreter, it releases exactly what a message holds — its body, topic, rows, column and the
reference to its type — for messages made in compiled code (outside the collector) and by
``tuple.__new__`` (linked in the collector's list) alike, freed by the collector or by their
count reaching zero; and nothing can subclass ``BatchMessage`` to hold more."""

from __future__ import annotations

import ctypes
import gc
import sys
import tracemalloc

import numpy as np
import pytest

from strata.format import message_dealloc as md
from strata.format import record_objects as ro
from strata.format.batch_message import BatchMessage, BatchRows
from strata.format.record import StoredMessage
from strata.format.record_table import F_BODY_AT, F_BODY_END, FIELDS


def _dealloc_slot(cls: type) -> int:
    return ctypes.c_ssize_t.from_address(id(cls) + md._TP_DEALLOC_AT).value


def test_installed_on_cpython_311():
    if sys.version_info[:2] != (3, 11) or hasattr(sys, "gettotalrefcount"):
        pytest.skip("the compiled dealloc is for CPython 3.11 release builds only")
    assert md.INSTALLED and md.install_batch_message()
    assert _dealloc_slot(BatchMessage) == md._dealloc.address
    assert _dealloc_slot(StoredMessage) != md._dealloc.address   # the namedtuple keeps its own


def _batch(n: int, size: int) -> tuple[bytes, np.ndarray, BatchRows]:
    buf = bytes(range(256)) * (n * size // 256 + 1)
    fields = np.zeros((FIELDS, n), np.int64)
    fields[F_BODY_AT] = np.arange(n) * size
    fields[F_BODY_END] = fields[F_BODY_AT] + size
    return buf, fields, BatchRows(buf, fields)


@pytest.mark.parametrize("direct", [0, 1])
def test_freeing_messages_releases_everything_they_hold(direct):
    if direct and not ro.DIRECT:
        pytest.skip("messages are made through PyType_GenericAlloc here")
    buf, fields, rows = _batch(2000, 100)
    topic = "a-topic"
    ids = ro.column_ids(2000)
    data = np.frombuffer(buf, np.uint8)

    def make() -> list:
        out = [None] * 2000
        assert ro.make_lazy(data.ctypes.data, fields, 0, 2000, id(BatchMessage), id(topic), 0,
                            id(rows), ids, id(out), direct) == 2000
        return out

    make()   # warm
    counts = (sys.getrefcount(topic), sys.getrefcount(rows), sys.getrefcount(BatchMessage),
              [sys.getrefcount(i) for i in ro._COLUMN_INTS[300:2000]])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(50):
            ms = make()
            assert bytes(ms[1999].body) == buf[1999 * 100:2000 * 100]
            assert ms[7]._rows is rows and ms[7].topic is topic
            del ms          # 2,000 messages freed by their count reaching zero
        assert ro.free_list_held() >= 2000   # their memory kept for the next ones ...
        ro.release_free_list()               # ... given back: what is left would be a leak
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown      # 100,000 messages of 100 B bodies made and freed
    assert counts == (sys.getrefcount(topic), sys.getrefcount(rows),
                      sys.getrefcount(BatchMessage),
                      [sys.getrefcount(i) for i in ro._COLUMN_INTS[300:2000]])


def test_messages_linked_in_the_collector_are_unlinked_when_freed():
    rows = BatchRows(b"", np.zeros((FIELDS, 1), np.int64))
    body = b"x" * 40
    refs = (sys.getrefcount(body), sys.getrefcount(rows), sys.getrefcount(BatchMessage))
    ms = [BatchMessage.of("t", body, rows, 0) for _ in range(1000)]
    assert all(gc.is_tracked(m) for m in ms[:10])
    gc.collect()                      # the collector walks them while they live
    del ms                            # then each is unlinked as it is freed
    gc.collect()                      # a list with a freed object still linked would crash
    assert (sys.getrefcount(body), sys.getrefcount(rows),
            sys.getrefcount(BatchMessage)) == refs


def test_a_message_in_a_container_cycle_is_freed_by_the_collector():
    rows = BatchRows(b"", np.zeros((FIELDS, 1), np.int64))
    body = b"y" * 8
    refs = sys.getrefcount(body)
    cycle: list = [BatchMessage.of("t", body, rows, 0)]
    cycle.append(cycle)
    del cycle
    gc.collect()
    assert sys.getrefcount(body) == refs


def test_batch_message_cannot_be_subclassed():
    with pytest.raises(TypeError, match="cannot be subclassed"):
        class Richer(BatchMessage):   # noqa: F841 (the class statement is the test)
            __slots__ = ()


def test_freed_messages_memory_is_kept_for_the_next_ones_up_to_the_cap():
    """A message made untracked leaves its memory on the free list when freed; the next
    messages made take it back and are whole messages of their own;
    one made through the collector is freed through it; the list holds at most FREE_CAP."""
    if not (ro.DIRECT and md.INSTALLED):
        pytest.skip("no free list on this interpreter")
    buf, fields, rows = _batch(3, 10)
    data = np.frombuffer(buf, np.uint8)
    ids = ro.column_ids(3)

    def make(n: int = 3, topic: str = "t") -> list:
        out = [None] * n
        assert ro.make_lazy(data.ctypes.data, fields, 0, n, id(BatchMessage), id(topic), 0,
                            id(rows), ids, id(out), 1) == n
        return out

    ro.release_free_list()
    ms = make()
    addresses = [id(m) for m in ms]
    del ms
    assert ro.free_list_held() == 3
    again = make(2, "u")
    assert {id(m) for m in again} < set(addresses) and ro.free_list_held() == 1
    assert [(m.topic, m.body, m._column) for m in again] == \
        [("u", buf[0:10], 0), ("u", buf[10:20], 1)]
    assert not any(map(gc.is_tracked, again))
    tracked = BatchMessage.of("t", b"x", rows, 0)
    del tracked, again
    assert ro.free_list_held() == 3          # the tracked one went back through the collector
    many = [make() for _ in range(ro.FREE_CAP // 3 + 10)]
    del many
    assert ro.free_list_held() == ro.FREE_CAP
    assert ro.release_free_list() == ro.FREE_CAP and ro.free_list_held() == 0
