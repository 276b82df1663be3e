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


def test_scan_batches_made_in_one_call_with_damage_and_a_cut_are_exact(tmp_path):
    """``scan``'s batches (``record_objects.make_scanned``: messages, and the one buffer of
    hosts, topic and properties they read from, made in one call) over thousands of rich
    messages on 1 MiB segments: every message as ``read_at`` decodes it, a CRC-damaged record
    in the middle of a batch skipped and named, and a scan cut inside a record stopping
    before it."""
    from strata.testing.faults import flip_bit
    from strata.format.segment import HEADER_AREA, file_name

    d = tmp_path / "s"
    seg = 1 << 20
    with strata.open(d, config(segment_size=seg)) as s:
        s.create_topic("t", queues=3)
        msgs = [strata.Message("t", bytes([i % 253]) * (i * 13 % 1100),
                               keys=[f"k{i}", f"j{i % 7}"][:1 + i % 2], tags=f"g{i % 3}",
                               properties={"p": str(i), "q": "v" * (i % 5)},
                               born_timestamp=1_600_000_000_000 + i)
                for i in range(5000)]
        put = []
        for i in range(0, 5000, 1000):
            put += s.put_batch(msgs[i:i + 1000])
        settle(s)
        scanned = list(s.scan(0))
        assert len(scanned) == 5000
        assert [m.body for m in scanned] == [m.body for m in msgs]
        assert all(_same(m, s.read_at(m.commitlog_offset)) for m in scanned[::97])
        assert [m.properties["p"] for m in scanned] == [str(i) for i in range(5000)]
        assert [m.keys for m in scanned[:4]] == [("k0",), ("k1", "j1"), ("k2",), ("k3", "j3")]
        # a body byte of message 1500 flipped: its CRC fails; the scan names it, goes on
        bad = put[1500]
        base = bad.commitlog_offset - bad.commitlog_offset % seg
        flip_bit(d / "commitlog" / file_name(base),
                 HEADER_AREA + bad.commitlog_offset - base + bad.size - 20, 3)
        damage = []
        again = list(s.scan(0, on_damage=lambda off, why: damage.append(off)))
        assert damage == [bad.commitlog_offset]
        assert [m.body for m in again] == [m.body for i, m in enumerate(msgs) if i != 1500]
        assert all(_same(m, w) for m, w in zip(again[1495:1505], scanned[1495:1506][:5] +
                                               scanned[1501:1506]))
        # cut inside message 3000's record: what starts below the cut, no damage
        cut = list(s.scan(put[2990].commitlog_offset, to_offset=put[3000].commitlog_offset + 5,
                          on_damage=lambda off, why: damage.append(off)))
        assert [m.properties["p"] for m in cut] == [str(i) for i in range(2990, 3001)]
        assert damage == [bad.commitlog_offset]
