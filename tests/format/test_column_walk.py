"""``column_walk``: ``put_columns``' Python-list columns read by one compiled walk. The
records must be byte for byte what the general path (``columns.keys_column`` and friends)
encodes, for usual (ASCII) and unusual values alike — the unusual ones go to that path — and
bad input must be refused with that path's error."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from strata.errors import InvalidInputError
from strata.format import column_walk, object_gather as og
from strata.store.prepared import Encoder

pytestmark = pytest.mark.skipif(not og.USABLE, reason="layout probe: not CPython 3.11")

ascii_text = st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=10)
any_text = st.text(max_size=6).filter(lambda s: not any("\ud800" <= c <= "\udfff" for c in s))
key = ascii_text | any_text | st.binary(max_size=4)
row = st.fixed_dictionaries({
    "body": st.binary(max_size=40),
    "keys": st.none() | ascii_text | st.lists(ascii_text, max_size=3) |
    st.tuples(ascii_text, ascii_text) | st.lists(key, max_size=2),
    "tags": st.none() | ascii_text | any_text,
    "props": st.none() | st.dictionaries(ascii_text.filter(bool), ascii_text, max_size=4) |
    st.dictionaries(any_text.filter(bool), any_text, max_size=2),
})


def prepared(rows, walk: bool, monkeypatch, **given):
    enc = Encoder(("127.0.0.1", 10911), 1 << 20, 1 << 24, 1 << 24)
    cols = {name: [r[name] for r in rows] for name in ("keys", "tags", "props")}
    cols.update(given)
    with monkeypatch.context() as m:
        if not walk:
            m.setattr(column_walk, "walk_lists", lambda *a: None)
        try:
            b = enc.prepare_columns("t", [r["body"] for r in rows], keys=cols["keys"],
                                    tags=cols["tags"], properties=cols["props"])
        except InvalidInputError as exc:
            return type(exc), str(exc)
    return bytes(b.blob), np.asarray(b.props_lens).tolist()


@settings(max_examples=80, deadline=None)
@given(st.lists(row, min_size=1, max_size=60))
def test_the_walk_encodes_what_the_general_path_encodes(rows):
    with pytest.MonkeyPatch.context() as mp:
        assert prepared(rows, True, mp) == prepared(rows, False, mp)


def test_usual_columns_are_walked_and_unusual_ones_are_not():
    rows = 40
    keys = [[f"k{i}", "x"] for i in range(rows)]
    tags = [f"t{i}" for i in range(rows)]
    props = [{"a": str(i)} for i in range(rows)]
    got = column_walk.walk_lists(keys, tags, props, rows)
    assert got is not None
    key_col, groups, tag_col, prop_col = got
    assert groups[:3].tolist() == [0, 2, 4] and bytes(key_col[2]) == b"k1"
    assert bytes(tag_col[5]) == b"t5"
    for bad in ([{"é": "v"}] + props[1:], [OrderedDict(a="v")] + props[1:],
                [{"KEYS": "v"}] + props[1:], [{"": "v"}] + props[1:], props[:-1]):
        assert column_walk.walk_lists(keys, tags, bad, rows) is None
    assert column_walk.walk_lists([b"k"] + keys[1:], tags, props, rows) is None
    assert column_walk.walk_lists(keys, ["a\0b"] + tags[1:], props, rows) is None


@pytest.mark.parametrize("bad", [{"KEYS": "v"}, {"": "v"}, {"n": 5}, 7])
def test_bad_properties_are_refused_as_the_general_path_refuses_them(bad, monkeypatch):
    rows = [dict(body=b"b", keys=["k"], tags="t", props={"p": "v"}) for _ in range(40)]
    rows[13]["props"] = bad
    walked, general = prepared(rows, True, monkeypatch), prepared(rows, False, monkeypatch)
    assert walked == general and walked[0] is not bytes and issubclass(walked[0],
                                                                       InvalidInputError)
