"""``object_gather``: the text fields of a batch of messages read by one compiled walk over
the Python objects. For ASCII text it must give exactly the columns the general C-speed path
(``columns.message_text``) gives, and records byte for byte the per-message encoder's; any
value it cannot take (non-ASCII, NUL, empty key or tag, other types, routing or flags) sends
the batch to the general path instead of being misread."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import strata
from strata.format import columns as col
from strata.format import object_gather as og
from strata.format import record as rec
from strata.store.prepared import COLUMNAR_BATCH, Encoder

pytestmark = pytest.mark.skipif(not og.USABLE, reason="layout probe: not CPython 3.11")

ascii_text = st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=12)
name = ascii_text.filter(lambda s: s and s not in (rec.PROP_KEYS, rec.PROP_TAGS))
row = st.fixed_dictionaries({
    "body": st.binary(max_size=60),
    "keys": st.lists(ascii_text.filter(bool), max_size=3),
    "as_tuple": st.booleans(),
    "tags": st.none() | ascii_text.filter(bool),
    "props": st.none() | st.dictionaries(name, ascii_text, max_size=6),
    "shard": st.none() | ascii_text,
    "born": st.none() | st.integers(0, 2 ** 63 - 1),
})


def message(r: dict) -> strata.Message:
    keys = tuple(r["keys"]) if r["as_tuple"] else r["keys"]
    return strata.Message("t", r["body"], keys=keys, tags=r["tags"], properties=r["props"],
                          shard_key=r["shard"], born_timestamp=r["born"])


def columns(text: col.MessageText) -> list:
    out = []
    for c in text:
        if isinstance(c, col.BytesColumn):
            out.append(c.to_list())
        else:
            out.append(None if c is None else np.asarray(c).tolist())
    return out


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=70))
def test_the_walk_gives_what_the_general_path_gives(rows):
    msgs = [message(r) for r in rows]
    exts = [m._ext for m in msgs]
    got = og.walk(msgs, strata.Message, 1 << 20)
    assert got is not None                           # ASCII, no NUL: the walk takes it
    text, born = got.text, got.born
    assert got.bodies.to_list() == [r["body"] for r in rows]
    assert got.topics == ["t"] and got.topic_codes is None
    ext_cols = list(zip(*[e or strata.store.message.EXT_DEFAULTS for e in exts]))
    want = col.message_text(ext_cols[0], ext_cols[1], ext_cols[2], ext_cols[4])
    assert columns(text) == columns(want)
    given_born = [r["born"] for r in rows]
    assert (born is None) == all(t is None for t in given_born)
    if born is not None:
        assert born.tolist() == [col.BORN_AT_PUT if t is None else t for t in given_born]
    if len(rows) >= COLUMNAR_BATCH:
        enc = Encoder(("127.0.0.1", 10911), 1 << 20, 1 << 24, 1 << 24)
        batch = enc.prepare(msgs)
        singles = [enc.prepare([m]) for m in msgs]
        cut = rec.TRAILER_SIZE if batch.blob is not None else 0
        assert bytes(batch.record_bytes()) == \
            b"".join(s.images[0][:len(s.images[0]) - cut] + bytes(cut) for s in singles)


UNUSUAL = {
    "non-ASCII key": dict(keys=["clé"]),
    "NUL in a tag": dict(tags="a\x00b"),
    "empty key": dict(keys=[""]),
    "empty tag": dict(tags=""),
    "int shard key": dict(shard_key=7),
    "keys a set": dict(keys={"a"}),
    "non-str property value": dict(properties={"n": 1}),
    "non-dict properties": dict(properties=[("n", "v")]),
    "property named KEYS": dict(properties={"a": "b", "KEYS": "x"}),
    "property named TAGS": dict(properties={"TAGS": "x"}),
    "empty property name": dict(properties={"": "x"}),
    "property value too long": dict(properties={"a": "v" * 65536}),
    "queue id": dict(queue_id=1),
    "flag": dict(flag=3),
    "born host": dict(born_host=("10.0.0.1", 5)),
    "bool born": None,
    "body not bytes": dict(body=bytearray(b"x")),
    "body over max_body": dict(body=b"x" * 101),
}


@pytest.mark.parametrize("case", sorted(UNUSUAL))
def test_unusual_values_go_to_the_general_path(case):
    msgs = [strata.Message("t", b"x", keys=["k"], properties={"a": "b"}) for _ in range(40)]
    kw = dict(UNUSUAL[case] or {})
    bad = strata.Message("t", kw.pop("body", b"x"), **kw)
    if UNUSUAL[case] is None:
        bad._ext = ((), None, None, None, None, True, 0, None, 0, 0, 0)   # past the checks
    assert og.walk(msgs, strata.Message, 100) is not None
    assert og.walk(msgs[:20] + [bad] + msgs[20:], strata.Message, 100) is None


def test_several_topics_and_plain_messages_among_rich_ones():
    msgs = [strata.Message("t", b"a", keys=["k"]), strata.Message("t", b"bb"),
            strata.Message("u", b"", tags="x")]
    got = og.walk(msgs, strata.Message, 100)
    assert got.topics == ["t", "u"] and got.topic_codes.tolist() == [0, 0, 1]
    assert got.bodies.to_list() == [b"a", b"bb", b""]
    assert got.text.keys.to_list() == [b"k"] and got.text.key_groups.tolist() == [0, 1, 1, 1]
    assert got.text.tags.to_list() == [b"", b"", b"x"]
    assert og.walk(msgs, dict, 100) is None   # not a class laid out as Message
    many = [strata.Message(f"t{i % (og.MAX_TOPICS + 1)}", b"x", tags="a") for i in range(200)]
    assert og.walk(many, strata.Message, 100).topics is None   # too many to number


def test_scratch_grows_for_a_large_batch_and_big_texts():
    big = "k" * 5000
    msgs = [strata.Message("t", b"x", keys=[big, f"k{i}"] * 6, properties={
        f"n{j}": big for j in range(5)}, shard_key=big) for i in range(300)]
    got = og.walk(msgs, strata.Message, 100)
    text, born = got.text, got.born
    assert born is None
    assert text.keys.to_list()[:3] == [big.encode(), b"k0", big.encode()]
    assert text.shard_keys.to_list() == [big.encode()] * 300
    assert text.properties.to_list()[0] == rec.encode_properties(None, None,
                                                                 msgs[0].properties)


def test_equal_topics_held_by_different_objects_are_one_topic():
    """The walk numbers topics by object or ASCII text: names that are equal but not the
    same object are one topic (as the per-message path sees them)."""
    from strata.store.prepared import Encoder
    enc = Encoder(("127.0.0.1", 10911), 1 << 20, 1 << 24, 1 << 24)
    names = ["".join(["to", "pic"]) for _ in range(2)]
    assert names[0] == names[1] and names[0] is not names[1]
    msgs = [strata.Message(names[i % 2], b"x", keys=[f"k{i}"]) for i in range(40)]
    assert og.walk(msgs, strata.Message, 100).topics == names[:1]   # compared by text
    batch = enc.prepare(msgs)
    assert batch.single_topic == "topic" and batch.topic_codes is None
    # a name no topic may have: the walk numbers it by object, the encoder refuses it
    odd = ["".join(["tó", "pico"]) for _ in range(2)]
    msgs = [strata.Message(odd[i % 2], b"x", keys=[f"k{i}"]) for i in range(40)]
    assert og.walk(msgs, strata.Message, 100).topics == odd
    with pytest.raises(strata.errors.InvalidInputError, match="topic"):
        enc.prepare(msgs)
