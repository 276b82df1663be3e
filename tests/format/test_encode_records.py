"""``record_encoding.encode_records``: its lengths and limits come from one compiled pass
(``record_lengths``); the records and lengths must be byte for byte what the numpy-checked
path (``_encode_checked``) gives, and a batch past a limit must be refused with the error that
path names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from strata.errors import InvalidInputError, MessageTooLargeError, PropertiesTooLargeError
from strata.format import columns as col
from strata.format import record as rec
from strata.format import record_encoding as renc

text = st.binary(max_size=20)
row = st.fixed_dictionaries({
    "body": st.binary(max_size=80),
    "keys": st.lists(st.text(max_size=8), max_size=3),
    "tag": st.text(max_size=8),
    "props": st.dictionaries(st.text(min_size=1, max_size=6).filter(
        lambda s: s not in (rec.PROP_KEYS, rec.PROP_TAGS)), st.text(max_size=6), max_size=3),
    "prefix": st.integers(0, 2),
})
PREFIXES = [b"\0" * 60 + b"topic", b"\0" * 60 + b"other-topic", b"\0" * 60 + b"t"]


def both(rows, **limits):
    keys, groups = col.keys_column([r["keys"] for r in rows], len(rows))
    args = dict(prefix_of=np.array([r["prefix"] for r in rows], np.int64), keys=keys,
                key_groups=groups, tags=col.as_column([r["tag"] for r in rows], len(rows),
                                                      "tags"),
                properties=col.properties_column([r["props"] for r in rows], len(rows)),
                max_body=limits.get("max_body", 1 << 20),
                max_record=limits.get("max_record", 1 << 20))
    bodies = col.BytesColumn.of([r["body"] for r in rows])
    out = []
    for fn in (renc.encode_records, renc._encode_checked):
        try:
            enc = fn(PREFIXES, bodies, **args)
            out.append((bytes(enc.blob), enc.totals.tolist(), enc.body_lens.tolist(),
                        enc.props_lens.tolist()))
        except (InvalidInputError, MessageTooLargeError, PropertiesTooLargeError) as exc:
            out.append((type(exc), str(exc)))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(row, min_size=1, max_size=40))
def test_compiled_lengths_give_the_checked_paths_records(rows):
    fast, checked = both(rows)
    assert fast == checked
    assert len(fast[0]) == sum(fast[1])


@pytest.mark.parametrize("case", ["body", "key", "tag", "record", "properties"])
def test_a_batch_past_a_limit_is_refused_as_the_checked_path_refuses_it(case):
    rows = [dict(body=b"b" * 10, keys=["k"], tag="t", props={"p": "v"}, prefix=0)
            for _ in range(50)]
    limits = {}
    if case == "body":
        rows[7]["body"] = b"x" * 101
        limits["max_body"] = 100
    elif case == "key":
        rows[9]["keys"] = ["a", "k" * 70000]
    elif case == "tag":
        rows[3]["tag"] = "t" * 70000
    elif case == "record":
        rows[11]["body"] = b"x" * 300
        limits["max_record"] = 300
    else:
        rows[5]["props"] = {f"n{i}": "v" * 60000 for i in range(6)}
    fast, checked = both(rows, **limits)
    assert fast == checked
    assert isinstance(fast[0], type) and issubclass(fast[0], InvalidInputError)
