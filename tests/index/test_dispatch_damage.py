"""A damaged record that dispatch replays after an unclean stop (a flushed record with a flipped
bit: recovery trusts the flushed range by magic, lengths and own offset, so the record reaches
dispatch) costs that record only: the store opens, the record is never dispatched to a queue or
the key index, and every other message is served by ``get`` and ``query``."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import strata
from strata.files.checkpoint import CheckpointFile
from strata.testing.faults import flip_bit
from strata.format import record as rec
from strata.format.segment import HEADER_AREA, file_name

from support import SMALL_SEGMENT, body_for, small_store_config

TOPICS = ("t1", "t3")   # "t1" with bit 1 of its "1" flipped reads "t3"
SEGMENT = SMALL_SEGMENT


def config() -> strata.StoreConfig:
    return small_store_config(flush_interval_ms=20, checkpoint_interval_ms=1)


def put(store, seqs: range) -> dict[int, strata.PutResult]:
    """Messages ``seqs``, alternately to t1 and t3 (one queue each); key ``k<seq>``."""
    out = {}
    for seq in seqs:
        r = store.put(strata.Message(TOPICS[seq % 2], body_for(seq), keys=(f"k{seq}",)))
        assert r.ok
        out[seq] = r
    return out


def crash_with_everything_flushed(path) -> dict[int, strata.PutResult]:
    """50 messages, all flushed and covered by a checkpoint (dispatched up to message 20 only),
    then a crash (no clean close)."""
    store = strata.open(path, config())
    for t in TOPICS:
        store.create_topic(t, 1)
    placed = put(store, range(50))
    store._abandon(checkpointed=True)
    # the crash came while dispatch lagged behind the flush: the reopen replays from message 20
    cp = CheckpointFile(path)
    cp.store(dataclasses.replace(cp.load(), dispatched_offset=placed[20].commitlog_offset))
    return placed


def flip_in_record(path, r: strata.PutResult, within: int, bit: int) -> None:
    base = r.commitlog_offset - r.commitlog_offset % SEGMENT
    flip_bit(path / "commitlog" / file_name(base),
             HEADER_AREA + r.commitlog_offset - base + within, bit)


def topic_offset(r: strata.PutResult) -> int:
    """Bytes from the start of ``r``'s record to its topic (IPv4 hosts)."""
    return rec.HEADER_SIZE + 12


@pytest.mark.parametrize("where,bit", [
    ("topic", 7),      # the topic's first byte is no longer UTF-8
    ("topic+1", 1),    # "t1" reads "t3": a known topic, only the CRC tells
    ("queue_id", 2),   # queue 0 reads queue 4
], ids=["topic-not-utf8", "topic-renamed", "queue-id"])
def test_a_flushed_record_with_a_flipped_bit_is_skipped_by_dispatch(tmp_path, caplog, where,
                                                                     bit):
    path = tmp_path / "s"
    placed = crash_with_everything_flushed(path)
    victim = 34                                          # a t1 message
    assert placed[victim].commitlog_offset // SEGMENT == placed[49].commitlog_offset // SEGMENT
    within = {"topic": topic_offset(placed[victim]), "topic+1": topic_offset(placed[victim]) + 1,
              "queue_id": 12}[where]
    flip_in_record(path, placed[victim], within, bit)
    with caplog.at_level(logging.ERROR), strata.open(path, config()) as store:
        assert store.wait_dispatched()
        assert "dispatch skips the damaged record at commit-log offset %d" % \
            placed[victim].commitlog_offset in caplog.text
        assert store.topics() == list(TOPICS)
        assert store.queue_count("t1") == 1 and store.queue_count("t3") == 1
        for i, topic in enumerate(TOPICS):
            r = store.get(topic, 0, 0, 100)
            assert not r.corrupt
            got = [m.body for m in r.messages]
            assert got == [body_for(s) for s in range(i, 50, 2) if s != victim], topic
        for seq in range(50):
            found = [m.body for m in store.query(TOPICS[seq % 2], f"k{seq}")]
            assert found == ([] if seq == victim else [body_for(seq)]), seq
        assert store.query("t3", f"k{victim}") == []
