"""The messages ``get`` and ``scan`` hand out (``BatchMessage``s: topic and body their own, the
other fields read from their batch when asked for) are the messages ``read_at`` decodes one by
one: every field, equality both ways, hash, pickle (as a plain ``StoredMessage``), repr; they
outlive the store that read them; a rich message's keys, tags, properties and hosts come
through."""

from __future__ import annotations

import gc
import pickle

import strata
from strata.format.batch_message import BatchMessage
from store_helpers import config, settle

FIELDS = strata.StoredMessage.FIELDS + ("keys", "tags", "properties", "born_host",
                                        "store_host", "msg_id")


def _same(got, want) -> bool:
    return all(getattr(got, f) == getattr(want, f) for f in FIELDS) and got == want and \
        want == got and hash(got) == hash(want) and repr(got) == repr(want)


def test_get_and_scan_hand_out_what_read_at_decodes(tmp_path):
    with strata.open(tmp_path / "s", config()) as s:   # 64 KiB segments: reads cross rolls
        s.create_topic("t", queues=2)
        s.create_topic("u", queues=1)
        msgs = [strata.Message("tu"[i % 5 == 0], bytes([i % 251]) * (i * 37 % 900),
                               keys=[f"k{i}", "both"][:i % 3], tags=("a", None)[i % 2],
                               properties={"p": str(i)} if i % 4 else None,
                               born_timestamp=1_700_000_000_000 + i)
                for i in range(240)]
        for i in range(0, 240, 60):
            s.put_batch(msgs[i:i + 60])
        settle(s)
        kept = []
        for q in (0, 1):
            off = 0
            while True:
                r = s.get("t", q, off, 37)
                if not r.messages:
                    break
                for m in r.messages:
                    assert type(m) is BatchMessage and isinstance(m, strata.StoredMessage)
                    assert not gc.is_tracked(m)
                    want = s.read_at(m.commitlog_offset)
                    assert type(want) is strata.StoredMessage and _same(m, want)
                    back = pickle.loads(pickle.dumps(m))
                    assert type(back) is strata.StoredMessage and _same(back, want)
                kept += r.messages
                off = r.next_offset
        scanned = list(s.scan(0))
        assert len(scanned) == 240 and all(type(m) is BatchMessage for m in scanned)
        assert all(_same(m, s.read_at(m.commitlog_offset)) for m in scanned[::7])
        assert sorted(kept, key=lambda m: m.commitlog_offset) == \
            [m for m in scanned if m.topic == "t"]
        rich = [m for m in scanned if m.keys]
        assert rich and all(m.keys == tuple(msgs[int(m.properties["p"])].keys)
                            for m in rich if "p" in m.properties)
    # the store is closed (its maps gone): the messages still read as they did
    assert [m.body for m in scanned] == [m.body for m in msgs]
    assert [m.born_timestamp for m in scanned] == [1_700_000_000_000 + i for i in range(240)]
    assert {m.tags for m in kept} == {"a", None} and kept[0].store_host == scanned[0].store_host
