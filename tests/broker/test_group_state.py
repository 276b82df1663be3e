"""The consumer-group journal and state, and receipt handles, without a server."""

import os

import pytest

from strata.broker import journal as jr
from strata.broker.errors import CorruptJournalError, InvalidReceiptHandleError
from strata.broker.group_state import JOURNAL_NAME, ConsumerGroups
from strata.broker.receipt import Receipt, ReceiptSigner, load_or_create_secret

pytestmark = pytest.mark.broker


def _receipt(groups, offset, handle, deadline, group="g", topic="t", q=0):
    return Receipt(group, topic, q, offset, handle, deadline)


def test_replay_after_reopen_without_close_keeps_pops_acks_and_changes(tmp_path):
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0), (2, 0)], 3, deadline_ms=1000)
    assert g.ack([_receipt(g, 1, h[1], 1000)], now_ms=500) == [None]
    h2 = g.change_invisible(_receipt(g, 2, h[2], 1000), 9000, now_ms=600)
    # no close: what a SIGKILL leaves behind
    g2 = ConsumerGroups(tmp_path)
    q = g2.queue("g", "t", 0)
    assert q.pop_offset == 3 and sorted(q.in_flight) == [0, 2]
    assert q.in_flight[2].deadline_ms == 9000 and q.in_flight[2].handle_id == h2
    assert q.commit_offset() == 0
    assert g2.next_handle_id > h2                      # handle ids are never reused
    assert q.due(now_ms=1500, limit=10) == [(0, 1)]   # offset 2 is still invisible


def test_acks_refuse_replaced_expired_and_repeated_handles(tmp_path):
    g = ConsumerGroups(tmp_path)
    (h,) = g.pop("g", "t", 0, 0, [(0, 0)], 1, deadline_ms=1000)
    new = g.change_invisible(_receipt(g, 0, h, 1000), 5000, now_ms=100)
    with pytest.raises(InvalidReceiptHandleError, match="replaced"):
        g.change_invisible(_receipt(g, 0, h, 1000), 5000, now_ms=200)
    (err,) = g.ack([_receipt(g, 0, new, 5000)], now_ms=6000)
    assert isinstance(err, InvalidReceiptHandleError) and "expired" in str(err)
    assert g.ack([_receipt(g, 0, new, 5000)], now_ms=4000) == [None]
    (again,) = g.ack([_receipt(g, 0, new, 5000)], now_ms=4000)
    assert "already acknowledged" in str(again)


def test_a_torn_tail_is_cut_off_and_the_records_before_it_kept(tmp_path):
    g = ConsumerGroups(tmp_path)
    g.pop("g", "t", 0, 0, [(0, 0)], 1, deadline_ms=1000)
    g.pop("g", "t", 0, 0, [(1, 0)], 2, deadline_ms=1000)
    path = tmp_path / JOURNAL_NAME
    size = path.stat().st_size
    with open(path, "r+b") as f:                        # the last record half written
        f.truncate(size - 7)
    g2 = ConsumerGroups(tmp_path)
    assert sorted(g2.queue("g", "t", 0).in_flight) == [0]
    assert g2.journal.dropped_tail > 0
    data = path.read_bytes()
    records, end = jr.read_records(data)
    assert end == len(data)                              # rewritten whole


def test_a_damaged_header_is_a_clear_error(tmp_path):
    ConsumerGroups(tmp_path).close()
    path = tmp_path / JOURNAL_NAME
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError, match="header"):
        ConsumerGroups(tmp_path)


def test_every_record_kind_decodes_to_what_was_encoded():
    pop = jr.encode_pop("grp", "top", 3, 17, 12345, [(10, 1, 7), (12, 2, 8)])
    ack = jr.encode_ack("grp", "top", 3, [10, 12])
    change = jr.encode_change("grp", "top", 3, 12, 999, 9)
    state = jr.encode_state("grp", "top", 3, 17, [(12, 999, 2, 9)])
    counter = jr.encode_counter(42)
    records, end = jr.read_records(jr.encode_header() + pop + ack + change + state + counter)
    p, a, c, s, n = records
    assert (p.kind, p.group, p.topic, p.queue_id, p.offset, p.deadline_ms) == \
        (jr.Kind.POP, "grp", "top", 3, 17, 12345)
    assert [(e.offset, e.attempt, e.handle_id) for e in p.entries] == [(10, 1, 7), (12, 2, 8)]
    assert [e.offset for e in a.entries] == [10, 12]
    assert (c.offset, c.deadline_ms, c.entries[0].handle_id) == (12, 999, 9)
    assert [(e.offset, e.deadline_ms, e.attempt, e.handle_id) for e in s.entries] == \
        [(12, 999, 2, 9)]
    assert n.counter == 42


def test_receipt_handles_round_trip_and_resist_forgery(tmp_path):
    secret = load_or_create_secret(tmp_path / "receipt.key")
    assert load_or_create_secret(tmp_path / "receipt.key") == secret
    assert os.stat(tmp_path / "receipt.key").st_mode & 0o077 == 0
    signer = ReceiptSigner(secret)
    r = Receipt("g", "t", 2, 40, 7, 123456)
    handle = signer.encode(r)
    assert signer.decode(handle) == r
    with pytest.raises(InvalidReceiptHandleError, match="signature"):
        ReceiptSigner(b"x" * 32).decode(handle)
    with pytest.raises(InvalidReceiptHandleError):
        signer.decode(handle[:-2])
    with pytest.raises(InvalidReceiptHandleError, match="base64"):
        signer.decode("%%%")
