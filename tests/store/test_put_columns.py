"""``put_columns`` writes exactly what ``put_batch`` writes for the same messages, takes its
columns as Python sequences or as ``BytesColumn``s, and refuses bad input — naming the
message — before writing anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import strata
from strata.errors import InvalidInputError, MessageTooLargeError
from strata.format import record as rec
from strata.format.columns import BytesColumn
from store_helpers import clock, config, settle  # noqa: F401 (clock is a fixture)


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.parent.name != "index"}


text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
one_message = st.fixed_dictionaries({
    "body": st.binary(max_size=300),
    "keys": st.lists(text, max_size=3),
    "tags": st.none() | text,
    "props": st.none() | st.dictionaries(text.filter(lambda s: s not in ("KEYS", "TAGS")),
                                         st.text(max_size=8).filter(lambda s: "\ud800" > s or
                                                                    s > "\udfff"), max_size=3),
    "born": st.none() | st.integers(0, 2 ** 62),
})


def as_messages(topic: str, queue_id: int, rows: list[dict]) -> list[strata.Message]:
    return [strata.Message(topic, r["body"], keys=tuple(r["keys"]), tags=r["tags"],
                           properties=r["props"], born_timestamp=r["born"], queue_id=queue_id)
            for r in rows]


def columns_of(rows: list[dict], form: str, now: int) -> dict:
    """The rows as put_columns' arguments: Python sequences, or BytesColumns (keys one per
    message where each has at most one). A numpy born column cannot leave one item out: a
    message without a born timestamp gets ``now``, the store time of the put (which is what
    a message without one is born at), or the column is None when none has one."""
    if form == "python":
        return dict(bodies=[r["body"] for r in rows], keys=[r["keys"] for r in rows],
                    tags=[r["tags"] for r in rows], properties=[r["props"] for r in rows],
                    born_timestamps=[r["born"] for r in rows])
    kw = dict(bodies=BytesColumn.of([r["body"] for r in rows]),
              tags=BytesColumn.of([(r["tags"] or "").encode() for r in rows]),
              properties=BytesColumn.of([rec.encode_properties(None, None, r["props"])
                                         for r in rows]),
              born_timestamps=None if all(r["born"] is None for r in rows) else
              np.array([now if r["born"] is None else r["born"] for r in rows], np.int64))
    if all(len(r["keys"]) <= 1 for r in rows):
        kw["keys"] = BytesColumn.of([(r["keys"] or [""])[0].encode() for r in rows])
    else:
        kw["keys"] = [[k.encode() for k in r["keys"]] for r in rows]
    return kw


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(one_message, min_size=1, max_size=60), min_size=1,
                        max_size=3),
       form=st.sampled_from(["python", "columns"]))
def test_put_columns_writes_what_put_batch_writes(tmp_path_factory, clock, batches, form):
    root = tmp_path_factory.mktemp("cols")
    with strata.open(root / "batch", config()) as a, strata.open(root / "cols", config()) as b:
        for s in (a, b):
            s.create_topic("t", queues=3)
        ra, rb = [], []
        for rows in batches:
            ra += a.put_batch(as_messages("t", 2, rows))
            rb += b.put_columns("t", 2, **columns_of(rows, form, clock.t))
        assert ra == rb
        settle(a)
        settle(b)
        got = b.get("t", 2, 0, 1000).messages
        assert [m.body for m in got] == [r["body"] for rows in batches for r in rows]
        some = next(r for rows in batches for r in rows)
        if some["keys"]:
            assert b.query("t", some["keys"][0])   # the key index has them
        a.flush()
        b.flush()
    for sub in ("commitlog", "consumequeue"):
        assert files_of(root / "batch" / sub) == files_of(root / "cols" / sub)


def test_round_robin_and_empty_items(tmp_path):
    with strata.open(tmp_path / "s", config()) as s:
        s.create_topic("t", queues=4)
        r = s.put_columns("t", None, [b"a", b"b", b"c", b"d", b"e"],
                          keys=BytesColumn(b"k1k2", [0, 2, 2, 4, 4, 4]),
                          tags=["x", None, "", "y", None])
        assert [x.queue_id for x in r] == [0, 1, 2, 3, 0]
        assert s.put_columns("t", 0, []) == []
        settle(s)
        got = {m.body: m for m in s.scan()}
        assert got[b"a"].keys == ("k1",) and got[b"b"].keys == ()
        assert got[b"c"].keys == ("k2",) and got[b"c"].tags is None
        assert got[b"d"].tags == "y"
        assert [m.body for m in s.query("t", "k2")] == [b"c"]


BAD = [
    (dict(keys=BytesColumn(b"ok\xff\xfe", [0, 2, 4])), InvalidInputError, "key 1"),
    (dict(keys=BytesColumn(b"\xed\xa0\x80", [0, 0, 3])), InvalidInputError, "UTF-8"),
    (dict(tags=BytesColumn(b"\xe2\x82", [0, 2, 2])), InvalidInputError, "tag 0"),
    (dict(properties=BytesColumn(b"\x04\x00KEYS\x01\x00x", [0, 0, 9])), InvalidInputError,
     "message 1: a property is named KEYS"),
    (dict(properties=BytesColumn(b"\x05\x00ab", [0, 4, 4])), InvalidInputError,
     "message 0: an entry runs past"),
    (dict(properties=BytesColumn(b"\x00\x00\x01\x00x", [0, 5, 5])), InvalidInputError,
     "empty name"),
    (dict(properties=BytesColumn(b"\x01\x00a\x01\x00\xff", [0, 0, 6])), InvalidInputError,
     "not well-formed"),
    (dict(properties=[{"a": "b"}, {"TAGS": "x"}]), InvalidInputError, "reserved"),
    (dict(tags=["a"]), InvalidInputError, "1 items for 2 messages"),
    (dict(keys=[["a"], [3]]), InvalidInputError, "int"),
    (dict(born_timestamps=[1, -1]), InvalidInputError, "born_timestamps"),
    (dict(born_timestamps=["x", 1]), InvalidInputError, "born_timestamps"),
    (dict(keys=["k" * 70000, None]), MessageTooLargeError, "65535"),
]


@pytest.mark.parametrize("kw,exc,words", BAD)
def test_bad_columns_are_refused_before_anything_is_written(tmp_path, kw, exc, words):
    with strata.open(tmp_path / "s", config()) as s:
        s.create_topic("t", queues=2)
        with pytest.raises(exc, match=words):
            s.put_columns("t", 0, [b"x", b"y"], **kw)
        assert s.max_commitlog_offset() == 0


def test_bad_bodies_queue_and_offsets(tmp_path):
    with strata.open(tmp_path / "s", config(max_body_size=100)) as s:
        s.create_topic("t", queues=2)
        with pytest.raises(InvalidInputError, match="queue_id 2 does not exist"):
            s.put_columns("t", 2, [b"x"])
        with pytest.raises(MessageTooLargeError, match="message 1: body of 101 bytes"):
            s.put_columns("t", 0, [b"x", b"y" * 101])
        with pytest.raises(InvalidInputError, match="bytes"):
            s.put_columns("t", 0, ["text"])
        with pytest.raises(InvalidInputError, match="offsets"):
            BytesColumn(b"abc", [0, 4])
        with pytest.raises(InvalidInputError, match="offsets"):
            BytesColumn(b"abc", [2, 1])
        assert s.max_commitlog_offset() == 0
        r = s.put_columns("t", 1, BytesColumn(np.frombuffer(b"xxhello", np.uint8), [2, 7]))
        assert r.ok and s.read_at(r[0].commitlog_offset).body == b"hello"


def test_put_many_writes_what_separate_puts_write_and_refuses_items_alone(tmp_path, clock):
    """put_many: column batches and message lists in order, each answered as its own
    put would be; a bad item is refused alone (nothing of it written), the others stored."""
    with strata.open(tmp_path / "many", config()) as a, \
            strata.open(tmp_path / "one", config()) as b:
        for s in (a, b):
            s.create_topic("t", queues=2)
        items = [strata.ColumnBatch("t", 0, [b"a", b"b"], keys=["k1", None]),
                 [strata.Message("t", b"c", queue_id=1), strata.Message("u", b"d")],
                 strata.ColumnBatch("t", 5, [b"never"]),           # no queue 5
                 strata.ColumnBatch("t", 1, [b"e"], born_timestamps=[7]),
                 strata.ColumnBatch("t", 0, [b"x"], tags=[b"\xff"]),   # not UTF-8
                 []]
        got = a.put_many(items)
        assert isinstance(got[2], InvalidInputError) and "queue_id 5" in str(got[2])
        assert isinstance(got[4], InvalidInputError) and "tag 0" in str(got[4])
        assert list(got[5]) == []
        one = [b.put_columns("t", 0, [b"a", b"b"], keys=["k1", None]),
               b.put_batch([strata.Message("t", b"c", queue_id=1), strata.Message("u", b"d")]),
               b.put_columns("t", 1, [b"e"], born_timestamps=[7])]
        assert [list(got[i]) for i in (0, 1, 3)] == [list(r) for r in one]
        settle(a)
        assert [m.body for m in a.get("t", 1, 0, 10).messages] == [b"c", b"e"]
        assert [m.body for m in a.query("t", "k1")] == [b"a"]
        a.flush()
        b.flush()
    for sub in ("commitlog", "consumequeue"):
        assert files_of(tmp_path / "many" / sub) == files_of(tmp_path / "one" / sub)


def test_put_many_under_sync_flush_is_one_fsync(tmp_path):
    with strata.open(tmp_path / "s", config(flush="sync")) as s:
        s.create_topic("t", queues=4)
        s.put_columns("t", 0, [b"warm"])
        before = s._group_commit.fsyncs
        got = s.put_many([strata.ColumnBatch("t", q, [b"m%d" % i for i in range(50)])
                          for q in range(4)] + [[strata.Message("t", b"z", queue_id=3)]])
        assert s._group_commit.fsyncs - before == 1
        assert [r[0].queue_offset for r in got] == [1, 0, 0, 0, 50]
        assert all(r.ok for r in got)


def test_put_many_a_failure_after_an_appended_item_answers_the_rest_only(tmp_path, monkeypatch):
    """A store failure (here the commit log's append, e.g. an I/O error) while appending the
    second item: the first item is written and answered as stored, the failed one and those
    after it get the error — so nothing answered as failed was written."""
    with strata.open(tmp_path / "s", config()) as s:
        s.create_topic("t", queues=2)
        real = s.log.append_headers
        calls = []

        def flaky(*a, **kw):
            calls.append(1)
            if len(calls) == 2:
                raise OSError(5, "injected I/O error")
            return real(*a, **kw)
        monkeypatch.setattr(s.log, "append_headers", flaky)
        got = s.put_many([strata.ColumnBatch("t", q, [b"m%d" % i for i in range(40)])
                          for q in (0, 1, 0)])
        assert got[0].ok and [r.queue_offset for r in got[0]][:2] == [0, 1]
        assert isinstance(got[1], OSError) and got[2] is got[1]
        settle(s)
        assert len(s.get("t", 0, 0, 100).messages) == 40
        assert s.get("t", 1, 0, 100).messages == []
        monkeypatch.setattr(s.log, "append_headers", real)
        with pytest.raises(OSError):        # the first item failing: the put fails whole
            monkeypatch.setattr(s.log, "append_headers", lambda *a, **k: (_ for _ in ()).throw(
                OSError(5, "injected")))
            s.put_many([strata.ColumnBatch("t", 0, [b"x"] * 40)])
