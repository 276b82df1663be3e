"""Fetch answers prepared ahead (strata.broker.kafka.fetch): a client reading a backlog in
small Fetches gets every record once, in order, within its byte limits, whether an answer
was prepared ahead or read afresh; a prepared answer carries the high watermark of when it
is sent, not of when it was read; a Fetch that asks something else (a seek back) or a topic
deleted meanwhile is answered afresh; a client that names the partitions in a new order each
Fetch (as librdkafka does) is still answered from prepared answers. Raw requests (kafka-python's protocol classes), so the
offsets and limits asked are exactly the test's."""

import re

from clients import RAW
from kafka_support import KafkaServer, run_client

FETCH = '''
from kafka.record import MemoryRecords

def fetch_many(raw, topic, wants, limit):
    """One Fetch of [(partition, offset)] in that order, each partition up to ``limit``
    bytes: {partition: (error code, high watermark, record bytes, [(offset, value)])}."""
    F = REQ[1]
    r = raw.call(1, 11, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                 isolation_level=0, session_id=0, session_epoch=-1,
                 topics=[F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
                     partition=p, current_leader_epoch=-1, fetch_offset=o,
                     log_start_offset=-1, partition_max_bytes=limit) for p, o in wants])],
                 forgotten_topics_data=[], rack_id="")
    out = {}
    for p in r.responses[0].partitions:
        got = []
        if p.records:
            recs = MemoryRecords(bytes(p.records))
            while (b := recs.next_batch()) is not None:
                got += [(m.offset, m.value.decode()) for m in b]
        out[p.partition_index] = (p.error_code, p.high_watermark, len(p.records or b""), got)
    return out

def fetch_at(raw, topic, offset, limit):
    return fetch_many(raw, topic, [(0, offset)], limit)[0]
'''

SCRIPT = RAW + FETCH + '''
raw = Raw(BOOTSTRAP)
values = [b"v%03d-" % i + b"x" * 95 for i in range(300)]
for k in range(0, 300, 50):
    assert produce(raw, "ahead", 0, batch(-1, -1, -1, values[k:k + 50]))[0] == 0
offset, seen, sizes = 0, [], []
while offset < 300:                      # small Fetches: most answered from a prepared one
    code, hw, size, got = fetch_at(raw, "ahead", offset, 3000)
    assert code == 0 and hw == 300 and got and got[0][0] == offset, (code, hw, got[:1])
    seen += got
    sizes.append(size)
    offset = got[-1][0] + 1
# the answer to offset 300 is not prepared (nothing was left); read ahead of new records:
code, hw, size, first = fetch_at(raw, "ahead", 250, 3000)        # a seek back
more = [b"w%03d" % i for i in range(20)]
assert produce(raw, "ahead", 0, batch(-1, -1, -1, more))[0] == 0
code2, hw2, _s, second = fetch_at(raw, "ahead", first[-1][0] + 1, 3000)
# a prepared answer, then the topic deleted: the next Fetch is answered afresh
code3, _hw, _s, third = fetch_at(raw, "ahead", 0, 3000)
r = raw.call(20, 4, topic_names=["ahead"], timeout_ms=10000)
deleted = [t.error_code for t in r.responses]
code4, hw4, _s, fourth = fetch_at(raw, "ahead", third[-1][0] + 1, 3000)
out(seen=seen, sizes=sizes, first=[first[0], first[-1]], hw2=hw2, second=second[:1],
    code3=code3,
    deleted=deleted, code4=code4, fourth=fourth)
'''


def test_reading_a_backlog_in_small_fetches_served_ahead(tmp_path):
    server = KafkaServer(tmp_path / "store").start()
    try:
        got = run_client(SCRIPT, server.bootstrap)
    finally:
        assert server.stop() == 0
    assert got["seen"] == [[i, "v%03d-" % i + "x" * 95] for i in range(300)]
    assert len(got["sizes"]) > 10
    assert all(size <= 3000 for size in got["sizes"])
    (start, _v), (last, _w) = got["first"]
    assert start == 250 and last < 299
    # answered ahead (read before the 20 new records) but with the watermark of now
    assert got["hw2"] == 320
    assert got["second"] == [[last + 1, "v%03d-" % (last + 1) + "x" * 95]]
    assert got["code3"] == 0 and got["deleted"] == [0]
    assert got["code4"] == 3 and got["fourth"] == []        # UNKNOWN_TOPIC_OR_PARTITION
    served = re.search(r"([\d,]+) fetches answered ahead \(([\d,]+) prepared", server.log)
    assert served and int(served.group(1)) >= 10, server.log[-2000:]


ROTATING = RAW + FETCH + '''
raw = Raw(BOOTSTRAP)
C = REQ[19][3]
r = raw.call(19, 3, topics=[C.CreatableTopic(name="rot", num_partitions=3,
                                             replication_factor=1, assignments=[], configs=[])],
             timeout_ms=10000, validate_only=False)
assert r.topics[0].error_code == 0
lengths = {0: 40, 1: 400, 2: 160}          # partitions that reach their ends at different times
for p, n in lengths.items():
    vals = [b"p%d-%04d-" % (p, i) + b"x" * 90 for i in range(n)]
    for k in range(0, n, 100):
        assert produce(raw, "rot", p, batch(-1, -1, -1, vals[k:k + 100]))[0] == 0
offsets = {p: 0 for p in lengths}
seen = {p: [] for p in lengths}
order = [0, 1, 2]
fetches = 0
while any(offsets[p] < n for p, n in lengths.items()):
    order = order[1:] + order[:1]          # each Fetch names the partitions in a new order
    got = fetch_many(raw, "rot", [(p, offsets[p]) for p in order], 2500)
    fetches += 1
    for p, (code, _hw, _size, recs) in got.items():
        assert code == 0, (p, code)
        seen[p] += recs
        if recs:
            offsets[p] = recs[-1][0] + 1
out(seen={str(p): v for p, v in seen.items()}, fetches=fetches)
'''


def test_a_client_rotating_its_partitions_is_answered_from_prepared_answers(tmp_path):
    """librdkafka names a Fetch's partitions in a new order each time; once the partitions
    reach their ends at different offsets, the answer prepared ahead must still carry each
    partition's own next offset (paired by position, every other one was dropped)."""
    server = KafkaServer(tmp_path / "store").start()
    try:
        got = run_client(ROTATING, server.bootstrap)
    finally:
        assert server.stop() == 0
    for p, n in {0: 40, 1: 400, 2: 160}.items():
        assert got["seen"][str(p)] == [[i, "p%d-%04d-" % (p, i) + "x" * 90]
                                       for i in range(n)]
    served = re.search(r"([\d,]+) fetches answered ahead \(([\d,]+) prepared", server.log)
    assert served, server.log[-2000:]
    ahead, dropped = (int(g.replace(",", "")) for g in served.groups())
    assert got["fetches"] > 20
    assert dropped == 0 and ahead >= got["fetches"] - 2, (ahead, dropped, got["fetches"])
