"""Batch reads by store time: startingTimestamp / endingTimestamp and the per-queue JSON forms.

Kafka's rule: a timestamp resolves, per queue, to the first offset whose store time is >= it;
as an end it is exclusive. Timestamp options take precedence over offset options.
"""

from __future__ import annotations

import json
import time

import pytest

import strata
from strata.spark.geometry import open_readonly
from strata.spark.options import OptionError, parse_read_options, parse_stream_read_options
from strata.spark.planning import resolve_ranges

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def timed_store(tmp_path_factory):
    """Topic ev (2 queues) filled by three puts with distinct store times T[0] < T[1] < T[2];
    put k gives each queue 10 messages (offsets 10k .. 10k+9); queue 0 of topic quiet is empty."""
    path = tmp_path_factory.mktemp("timestamps") / "store"
    times = []
    with strata.open(path, strata.StoreConfig(segment_size=64 * 1024, prefault=False)) as s:
        s.create_topic("ev", queues=2)
        s.create_topic("quiet", queues=1)
        for k in range(3):
            if times:
                while strata.store.message_store.now_ms() <= times[-1]:
                    time.sleep(0.002)
            res = s.put_batch([strata.Message("ev", f"p{k}-q{q}-{i}".encode(), queue_id=q)
                               for q in (0, 1) for i in range(10)])
            times.append(res[0].store_timestamp)
        s.wait_dispatched()
    return path, times


def ranges(path, **opts):
    o = parse_read_options({"path": str(path), **opts})
    with open_readonly(path) as store:
        return {(r.topic, r.queue_id): (r.start, r.end) for r in resolve_ranges(store, o)}


def test_starting_and_ending_timestamp_pick_first_offset_at_or_after(timed_store):
    path, T = timed_store
    both = {("ev", 0), ("ev", 1)}
    assert ranges(path, subscribe="ev", startingTimestamp=str(T[1])) == \
        {q: (10, 30) for q in both}
    assert ranges(path, subscribe="ev", startingTimestamp=str(T[1] + 1)) == \
        {q: (20, 30) for q in both}
    assert ranges(path, subscribe="ev", startingTimestamp="0") == {q: (0, 30) for q in both}
    assert ranges(path, subscribe="ev", endingTimestamp=str(T[2])) == {q: (0, 20) for q in both}
    assert ranges(path, subscribe="ev", endingTimestamp=str(T[2] + 1)) == \
        {q: (0, 30) for q in both}  # nothing stored at or after it: the end is the latest
    assert ranges(path, subscribe="ev", startingTimestamp=str(T[1]),
                  endingTimestamp=str(T[1] + 1)) == {q: (10, 20) for q in both}


def test_timestamp_options_take_precedence_and_json_is_per_queue(timed_store):
    path, T = timed_store
    # startingTimestamp beats startingOffsetsByTimestamp, which beats startingOffsets
    assert ranges(path, subscribe="ev", startingOffsets='{"ev": {"0": 5, "1": 7}}',
                  startingOffsetsByTimestamp=json.dumps({"ev": {"0": T[2]}}),
                  startingTimestamp=str(T[1])) == {("ev", 0): (10, 30), ("ev", 1): (10, 30)}
    assert ranges(path, subscribe="ev", startingOffsets='{"ev": {"0": 5, "1": 7}}',
                  startingOffsetsByTimestamp=json.dumps({"ev": {"0": T[2]}})) == \
        {("ev", 0): (20, 30), ("ev", 1): (7, 30)}  # queue 1 is not in the JSON: its offset
    assert ranges(path, subscribe="ev", endingOffsets='{"ev": {"0": 3}}',
                  endingOffsetsByTimestamp=json.dumps({"ev": {"0": T[1], "1": T[2]}})) == \
        {("ev", 0): (0, 10), ("ev", 1): (0, 20)}
    assert ranges(path, subscribe="ev", endingOffsets='{"ev": {"1": 4}}',
                  endingOffsetsByTimestamp=json.dumps({"ev": {"0": T[1]}})) == \
        {("ev", 0): (0, 10), ("ev", 1): (0, 4)}


def test_no_message_at_or_after_starting_timestamp_follows_the_strategy(timed_store):
    path, T = timed_store
    late = str(T[2] + 1)
    with pytest.raises(OptionError, match="option 'startingTimestamp': ev/0 has no message"):
        ranges(path, subscribe="ev", startingTimestamp=late)
    with pytest.raises(OptionError, match="option 'startingOffsetsByTimestamp': ev/1"):
        ranges(path, subscribe="ev",
               startingOffsetsByTimestamp=json.dumps({"ev": {"0": T[0], "1": T[2] + 1}}))
    assert ranges(path, subscribe="ev", startingTimestamp=late,
                  startingOffsetsByTimestampStrategy="latest") == \
        {("ev", 0): (30, 30), ("ev", 1): (30, 30)}
    with pytest.raises(OptionError, match="quiet/0 has no message"):  # as Kafka: empty queues too
        ranges(path, subscribe="quiet", startingTimestamp="0")


@pytest.mark.parametrize("opts, option", [
    ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"endingTimestamp": "-5"}, "endingTimestamp"),
    ({"startingOffsetsByTimestamp": "{bad"}, "startingOffsetsByTimestamp"),
    ({"startingOffsetsByTimestamp": '{"ev": {"0": -1}}'}, "startingOffsetsByTimestamp"),
    ({"endingOffsetsByTimestamp": '{"ev": {"x": 5}}'}, "endingOffsetsByTimestamp"),
    ({"endingOffsetsByTimestamp": '{"ev": {"7": 5}}'}, "endingOffsetsByTimestamp"),
    ({"startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy"),
])
def test_bad_timestamp_options_name_the_option(timed_store, opts, option):
    with pytest.raises(OptionError, match=f"option '{option}'"):
        ranges(timed_store[0], subscribe="ev", **opts)


def test_start_after_end_names_the_starting_option(timed_store):
    path, T = timed_store
    with pytest.raises(OptionError, match="option 'startingTimestamp'.*after the ending"):
        ranges(path, subscribe="ev", startingTimestamp=str(T[2]), endingTimestamp=str(T[1]))


def test_streams_refuse_ending_timestamps(timed_store):
    for name in ("endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(OptionError, match=f"option '{name}'.*batch reads only"):
            parse_stream_read_options({"path": str(timed_store[0]), "subscribe": "ev",
                                       name: "5" if name == "endingTimestamp" else "{}"})


def test_spark_read_by_timestamps(spark, timed_store):
    path, T = timed_store
    df = (spark.read.format("strata").option("path", str(path)).option("subscribe", "ev")
          .option("startingTimestamp", str(T[1])).option("endingTimestamp", str(T[2])).load())
    rows = df.collect()
    assert sorted(bytes(r.value).decode() for r in rows) == \
        sorted(f"p1-q{q}-{i}" for q in (0, 1) for i in range(10))
    assert {int(r.timestamp.timestamp() * 1000) for r in rows} == {T[1]}
    with pytest.raises(Exception, match="option 'startingTimestamp'"):
        (spark.read.format("strata").option("path", str(path)).option("subscribe", "ev")
         .option("startingTimestamp", str(T[2] + 1)).load().collect())
