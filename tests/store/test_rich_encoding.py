"""A large batch of rich messages (keys, tags, properties, shard keys, born timestamps) is
encoded column by column (``Encoder._prepare_rich`` with ``columns.message_text``: all text in
one join, split in compiled code); every record must be byte for byte the one the
message-by-message encoder makes, and every shard key must pick the queue the per-message path
picks."""

from __future__ import annotations

from crc32c import crc32c
from hypothesis import given, settings, strategies as st

import strata
from strata.format import record as rec
from strata.store.prepared import COLUMNAR_BATCH, Encoder

# any text but lone surrogates (not UTF-8); NUL included (such a batch takes the other path)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
name = text.filter(lambda s: s and s not in (rec.PROP_KEYS, rec.PROP_TAGS))
one = st.fixed_dictionaries({
    "topic": st.sampled_from(["t", "other", "third_topic"]),
    "body": st.binary(max_size=200),
    "keys": st.lists(text.filter(bool), max_size=3),
    "tags": st.none() | text.filter(bool),
    "props": st.none() | st.dictionaries(name, text, max_size=12),   # empty values too
    "shard": st.none() | text | st.integers(-5, 10 ** 12),
    "born": st.none() | st.integers(0, 2 ** 62),
})


def encoder() -> Encoder:
    return Encoder(("127.0.0.1", 10911), 1 << 20, 1 << 24, 1 << 24)


def message(r: dict) -> strata.Message:
    return strata.Message(r["topic"], r["body"], keys=r["keys"], tags=r["tags"],
                          properties=r["props"], shard_key=r["shard"],
                          born_timestamp=r["born"])


def has_nul(r: dict) -> bool:
    texts = [*r["keys"], r["tags"] or "", *(r["props"] or {}).keys(),
             *(r["props"] or {}).values(), r["shard"] if isinstance(r["shard"], str) else ""]
    return any("\x00" in t for t in texts)


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(one, min_size=1, max_size=12), n=st.integers(COLUMNAR_BATCH, 80))
def test_rich_batches_encode_as_message_by_message(kinds, n):
    rows = [kinds[i % len(kinds)] for i in range(n)]   # a few kinds of message, cycled
    enc = encoder()
    msgs = [message(r) for r in rows]
    batch = enc.prepare(msgs)
    singles = [enc.prepare([m]) for m in msgs]   # the per-message encoder, one each
    if not any(has_nul(r) for r in rows):
        assert batch.vector_queues   # the column path took it (not the fallback)
    # the column path leaves each trailer (the record's length) for the writer to fill in
    cut = rec.TRAILER_SIZE if batch.blob is not None else 0
    assert bytes(batch.record_bytes()) == \
        b"".join(s.images[0][:len(s.images[0]) - cut] + bytes(cut) for s in singles)
    assert list(batch.totals) == [s.totals[0] for s in singles]
    assert list(batch.props_lens) == [s.props_lens[0] for s in singles]
    assert list(batch.body_lens) == [len(r["body"]) for r in rows]
    queues = {"t": 5, "other": 3, "third_topic": 8}
    batch.choose_queues(queues, 4, {}, {})
    # a message without a born timestamp is born at the put (the batch's store timestamp)
    assert batch.headers(1234)["born_ts"].tolist() == \
        [1234 if r["born"] is None else r["born"] for r in rows]
    for r, q in zip(rows, batch.queue_ids):
        if r["shard"] is not None:
            assert q == crc32c(str(r["shard"]).encode()) % queues[r["topic"]]


def test_many_properties_unicode_and_empty_values_round_trip(tmp_path):
    props = {f"p{i}-ß": ("" if i % 3 == 0 else f"v{i}-€" * (i % 4)) for i in range(40)}
    msgs = [strata.Message("t", b"x%d" % i, keys=[f"k{i}", "名前"], tags="标签",
                           properties=props if i % 2 else {"only": ""}, shard_key=f"s{i % 5}",
                           born_timestamp=i) for i in range(100)]
    assert encoder().prepare(msgs).vector_queues
    with strata.open(tmp_path / "s") as store:
        store.put_batch(msgs)
        got = sorted(store.scan(), key=lambda m: m.born_timestamp)
    assert [(m.body, m.keys, m.tags, m.properties) for m in got] == \
        [(m.body, tuple(m.keys), m.tags, m.properties) for m in msgs]


def test_bad_text_in_a_large_batch_is_refused_naming_it(tmp_path):
    good = [strata.Message("t", b"b", keys=["k"], properties={"a": "b"}) for _ in range(40)]
    with strata.open(tmp_path / "s") as store:
        for bad, words in ((strata.Message("t", b"b", keys=[""]), "non-empty"),
                           (strata.Message("t", b"b", tags=""), "non-empty"),
                           (strata.Message("t", b"b", properties={"KEYS": "x"}), "reserved"),
                           (strata.Message("t", b"b", properties={"a": 1}), "must be a str"),
                           (strata.Message("t", b"b", keys=["\ud800"]), "UTF-8")):
            try:
                store.put_batch(good + [bad])
            except strata.errors.InvalidInputError as exc:
                assert words in str(exc)
            else:
                raise AssertionError(f"{bad!r} was accepted")
        assert list(store.scan()) == []


def test_a_batch_of_more_topics_than_numbered_in_compiled_code_is_dispatched(tmp_path):
    # dispatch numbers a batch's distinct topics in compiled code up to MAX_BATCH_TOPICS,
    # then reads one topic slice per record; both ways every message reaches its topic
    from strata.index.dispatch_batch import MAX_BATCH_TOPICS
    for n_topics in (3, MAX_BATCH_TOPICS + 6):
        topics = [f"t{i}" + "x" * (i % 4) for i in range(n_topics)]
        msgs = [strata.Message(topics[i % n_topics], b"%d" % i, keys=[f"k{i}"])
                for i in range(2 * n_topics + 40)]
        with strata.open(tmp_path / f"s{n_topics}") as store:
            for t in topics:
                store.create_topic(t, queues=1)
            store.put_batch(msgs)
            store.wait_dispatched()
            for t in topics:
                got = store.get(t, 0, 0, 1000).messages
                assert [m.body for m in got] == [m.body for m in msgs if m.topic == t]
            assert [m.body for m in store.query(topics[-1], "k%d" % (n_topics - 1))] == \
                [b"%d" % (n_topics - 1)]


def test_rich_batch_as_a_tuple_is_stored_as_the_list_is(tmp_path):
    """``put_batch`` of a tuple of rich messages (large enough for the columnar path) stores
    what the same messages as a list store (the compiled walk reads a list's item array; a
    tuple's items are inline, and were once read as if they were a list's)."""
    import strata
    msgs = [strata.Message("t", b"body-%d" % i, keys=[f"k{i}"], tags="tg",
                           properties={"p": str(i)}) for i in range(300)]
    got = {}
    for kind in (list, tuple):
        with strata.open(tmp_path / kind.__name__) as s:
            s.create_topic("t", queues=1)
            s.put_batch(kind(msgs))
            s.wait_dispatched(30)
            got[kind] = [(m.body, m.keys, m.tags, m.properties.get("p"))
                         for m in s.get("t", 0, 0, 400).messages]
            assert [m.body for m in s.query("t", "k7")] == [b"body-7"]
    assert got[list] == got[tuple] and len(got[list]) == 300
