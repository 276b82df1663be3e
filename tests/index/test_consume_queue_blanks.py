"""Blank units between real ones (prepared/rolled-back transactional records hold a queue
offset but get no unit) must not derail the binary searches over a consume queue."""

from __future__ import annotations

import strata
from strata.index.consume_queue import ConsumeQueue

TX_PREPARED = 0x4


def _queue(tmp_path) -> ConsumeQueue:
    cq = ConsumeQueue(tmp_path / "q", "t", 0, 16)
    cq.load()
    # unit 3 and 6 are blank: offsets taken by records that are not dispatched
    cq.put_batch([(0, 100, 10, 0), (1, 110, 10, 0), (2, 120, 10, 0), (4, 140, 10, 0),
                  (5, 150, 10, 0), (7, 170, 10, 0)])
    return cq


def test_min_offset_with_blank_units_in_the_middle(tmp_path):
    cq = _queue(tmp_path)
    for min_phys, want in ((0, 0), (100, 0), (101, 1), (125, 4), (141, 5), (160, 7), (171, 8)):
        cq.min_unit = 0
        cq.correct_min_offset(min_phys)
        assert cq.min_offset() == want, min_phys


def test_truncate_with_blank_units_in_the_middle(tmp_path):
    # a blank just before the cut goes too: its record may lie past the cut; replay refills it
    for phys_end, keep in ((115, 2), (125, 3), (145, 5), (165, 6), (999, 8)):
        cq = _queue(tmp_path / str(phys_end))
        cq.truncate_by_phys(phys_end)
        assert cq.max_offset() == keep, phys_end
        cq.close()


def test_store_reads_every_message_around_a_prepared_one(tmp_path):
    with strata.open(tmp_path / "s", strata.StoreConfig(prefault=False)) as store:
        store.create_topic("t", queues=1)
        store.put_batch([strata.Message("t", b"%d" % i, sys_flag=TX_PREPARED if i == 4 else 0)
                         for i in range(10)])
        store.wait_dispatched()
    with strata.open(tmp_path / "s", readonly=True) as store:
        assert store.min_offset("t", 0) == 0
        got = store.get("t", 0, 0, 32)
        assert [m.body for m in got.messages] == [b"%d" % i for i in range(10) if i != 4]


def test_commitlog_offsets_at_reads_units_across_files_and_blanks(tmp_path):
    cq = ConsumeQueue(tmp_path / "q", "t", 0, 4)        # 4 units per file: three files
    cq.load()
    cq.put_batch([(n, 1000 + 10 * n, 10, 0) for n in range(10) if n != 6])   # 6 is blank
    got = cq.commitlog_offsets_at([0, 3, 4, 5, 6, 7, 9, 10, 50])
    assert got.tolist() == [1000, 1030, 1040, 1050, 0, 1070, 1090, 0, 0]   # 10+: not written
    assert cq.commitlog_offsets_at([]).tolist() == []
    cq.close()
