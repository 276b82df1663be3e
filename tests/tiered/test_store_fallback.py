"""Once local retention deleted the oldest segments, every read API of the store answers the
old messages from the tier, byte for byte as it answered them locally: the writer, a
read-only opener (which finds the tier in config/tier.json) and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest

import strata
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadPolicy
from strata.tiered.layout import chunk_path
from tier_helpers import TOPICS, fill, local_history, tier_config

N = 1200
FAR = int((datetime.now() + timedelta(days=30)).timestamp() * 1000)   # every segment expired


@pytest.fixture
def small_chunks():
    tier_service.DEFAULT_POLICY = UploadPolicy(chunk_messages=40, commit_every=3)
    yield
    tier_service.DEFAULT_POLICY = None


def snapshot(store) -> dict:
    """What the read APIs answer now (all of it local)."""
    hist = local_history(store)
    times = {}
    for (topic, q), msgs in hist.items():
        ts = [m.store_timestamp for m in msgs]
        for t in (0, ts[0] - 1, ts[0], ts[len(ts) // 3], ts[-1], ts[-1] + 1):
            for b in ("lower", "upper"):
                times[(topic, q, t, b)] = store.offset_for_time(topic, q, t, b)
    return {"hist": hist, "times": times,
            "earliest": {k: store.earliest_time(*k) for k in hist},
            "query": {(TOPICS[s % 2], f"k{s}"): store.query(TOPICS[s % 2], f"k{s}")
                      for s in (0, 1, 5, 333, 700, N - 1)},
            "scan": list(store.scan(0))}


def check_answers_like(store, before: dict) -> None:
    """Every read API answers as ``before`` although the local files hold only the end."""
    log_min = store.first_commitlog_offset()
    assert store.log.min_offset() > 0 and log_min == 0
    for (topic, q), msgs in before["hist"].items():
        assert store.min_offset(topic, q) == 0
        assert store.earliest_time(topic, q) == before["earliest"][(topic, q)]
    assert local_history(store) == before["hist"]
    for key, want in before["times"].items():
        assert store.offset_for_time(*key) == want, key
    for (topic, key), want in before["query"].items():
        assert want and store.query(topic, key) == want, key
    old = [m for msgs in before["hist"].values() for m in msgs
           if m.commitlog_offset < store.log.min_offset()]
    assert len(old) > N // 2
    for m in old[::37]:
        assert store.read_at(m.commitlog_offset) == m
        assert store.get_by_id(m.msg_id) == m
    assert store.read_at(old[5].commitlog_offset + 1) is None     # not a record start
    assert list(store.scan(0)) == before["scan"]
    mid = old[len(old) // 2].commitlog_offset
    assert list(store.scan(mid)) == [m for m in before["scan"] if m.commitlog_offset >= mid]
    r = store.get("orders", 2, 3, 5, tags="red")                    # a tag filter in the tier
    want = [m for m in before["hist"][("orders", 2)] if m.tags == "red"]
    assert r.messages == [m for m in want if m.queue_offset >= 3][:5] and r.min_offset == 0


def test_every_read_api_answers_from_the_tier(tier, tmp_store_dir, small_chunks):
    cfg = tier_config(tier)
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        before = snapshot(store)
        assert store.clean_expired(FAR) >= 3
        check_answers_like(store, before)
        with strata.open(tmp_store_dir, readonly=True) as ro:      # beside the writer
            check_answers_like(ro, before)
    with strata.open(tmp_store_dir) as store:        # no config: the remembered tier
        assert store.config.tier_url == tier.url and store.tier is not None
        check_answers_like(store, before)
    with strata.open(tmp_store_dir, readonly=True) as ro:          # no writer
        check_answers_like(ro, before)
    assert json.loads((tmp_store_dir / "config" / "tier.json").read_bytes()) == {
        "version": 1, "tier_url": tier.url, "endpoint_url": tier.endpoint}


def strata_cmd(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)


def test_cli_reads_the_tiered_history(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        before = snapshot(store)
        store.clean_expired(FAR)
        log_min = store.log.min_offset()
    r = strata_cmd("get", tmp_store_dir, "orders", 0, 0, "-n", 5)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert [g["msg_id"] for g in got] == [m.msg_id for m in before["hist"][("orders", 0)][:5]]
    assert "status FOUND, next offset 5, min 0" in r.stderr
    r = strata_cmd("query", tmp_store_dir, "audit", "k1")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["msg_id"] for x in r.stdout.splitlines()] == \
        [m.msg_id for m in before["query"][("audit", "k1")]]
    r = strata_cmd("scan", tmp_store_dir, "--limit", 50)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["commitlog_offset"] for x in r.stdout.splitlines()] == \
        [m.commitlog_offset for m in before["scan"][:50]]
    info = json.loads(strata_cmd("info", "--json", tmp_store_dir).stdout)
    assert info["tier_url"] == tier.url and info["first_offset"] == 0
    assert info["min_offset"] == log_min > 0


def test_a_damaged_tier_object_is_named_not_served(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        before = snapshot(store)
        store.clean_expired(FAR)
        msgs = before["hist"][("orders", 0)]
        path = chunk_path("orders", 0, 0, "log")
        b = tier.backend()
        raw = bytearray(b.read(path))
        raw[msgs[0].size + msgs[1].size - 20] ^= 0x40     # record 1's body
        b.put(path, bytes(raw))
        store.tier.history.cache.drop(path)
        r = store.get("orders", 0, 0, 4)
        assert r.messages == [msgs[0]] + msgs[2:4]
        assert [c.queue_offset for c in r.corrupt] == [1] and r.next_offset == 4
        assert path in r.corrupt[0].reason and path in str(r.corrupt[0].error())
        with pytest.raises(strata.errors.CorruptStoreError, match=path):
            store.read_at(msgs[1].commitlog_offset)
        with pytest.raises(strata.errors.CorruptStoreError, match=path):
            store.get_by_id(msgs[1].msg_id)
        with pytest.raises(strata.errors.CorruptStoreError, match=path):
            list(store.scan(0))
    r = strata_cmd("get", tmp_store_dir, "orders", 0, 0, "-n", 3)
    assert r.returncode == 1 and path in r.stderr and "Traceback" not in r.stderr
    assert [json.loads(x)["queue_offset"] for x in r.stdout.splitlines()] == [0, 2]


def test_below_the_tiers_min_is_offset_too_small(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        store.clean_expired(FAR)
        local_min = store.queues.get("orders", 0).min_offset()
        assert store.get("orders", 0, 0).status is strata.GetStatus.FOUND
        store.tier.dispatcher.expire(FAR + 10**12)      # tier retention drops every chunk
        r = store.get("orders", 0, 0)
        assert r.status is strata.GetStatus.OFFSET_TOO_SMALL
        assert r.next_offset == local_min == store.min_offset("orders", 0) > 0


def test_another_tier_url_is_refused_and_changes_nothing(tier, tmp_path, tmp_store_dir):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 10)
    saved = (tmp_store_dir / "config" / "tier.json").read_bytes()
    other = f"file://{tmp_path / 'elsewhere'}"
    for ro in (False, True):
        with pytest.raises(strata.errors.InvalidConfigError, match="store's tier is"):
            strata.open(tmp_store_dir, tier_config(tier).__class__(
                **{**tier_config(tier).__dict__, "tier_url": other}), readonly=ro)
    assert (tmp_store_dir / "config" / "tier.json").read_bytes() == saved
    assert not (tmp_path / "elsewhere").exists()
    (tmp_store_dir / "config" / "tier.json").write_bytes(b'{"version": 1, "tier_url": 3}')
    with pytest.raises(strata.errors.CorruptStoreError, match="tier.json"):
        strata.open(tmp_store_dir, readonly=True)


def test_below_a_partly_expired_tiers_min_is_offset_too_small(tier, tmp_store_dir,
                                                              small_chunks):
    """Tier retention dropped the oldest chunks, local retention the oldest segments: `get`
    below the tier's new first offset says OFFSET_TOO_SMALL and points at it; from there the
    tier answers, then the local files."""
    hour = 3_600_000
    with strata.open(tmp_store_dir, tier_config(tier, tier_retention_hours=1.0)) as store:
        fill(store, 400)
        store.tier_sync(timeout_s=60)
        t_old = max(c.max_ts for q in store.tier.meta.meta.queues.values() for c in q.chunks)
        time.sleep(0.005)                        # the next messages get a later store time
        fill(store, N - 400, start=400)
        store.tier_sync(timeout_s=60)
        before = local_history(store)
        store.clean_expired(FAR)
        store.tier.dispatcher.clock_ms = lambda: t_old + hour + 1
        store.tier_sync(timeout_s=60)           # its round drops the first 400's chunks
        for (topic, q), msgs in before.items():
            tmin = store.min_offset(topic, q)
            local_min = store.queues.get(topic, q).min_offset()
            assert 0 < tmin < local_min
            assert all(m.store_timestamp <= t_old for m in msgs[:tmin])
            r = store.get(topic, q, tmin - 1)
            assert r.status is strata.GetStatus.OFFSET_TOO_SMALL and r.next_offset == tmin
            assert store.earliest_time(topic, q) == msgs[tmin].store_timestamp
            assert store.offset_for_time(topic, q, 0) == tmin
            got, off = [], tmin
            while off < store.max_offset(topic, q):
                r = store.get(topic, q, off, 7)
                got += r.messages
                off = r.next_offset
            assert got == msgs[tmin:]


def test_a_reader_opened_before_retention_follows_the_tier(tier, tmp_store_dir, small_chunks):
    """A read-only opener that opened while everything was local goes on reading the old
    messages once the writer uploaded them and deleted its files (it re-reads the writer's
    tier metadata when it changes)."""
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 300)
        store.wait_dispatched()
        with strata.open(tmp_store_dir, readonly=True) as ro:
            assert ro.get("orders", 0, 0).status is strata.GetStatus.FOUND
            first = ro.get("orders", 0, 0, 3).messages
            fill(store, N, start=300)
            store.tier_sync(timeout_s=60)
            assert store.clean_expired(FAR) >= 3
            assert ro.first_commitlog_offset() == 0 < ro._local_min_phys()
            assert ro.get("orders", 0, 0, 3).messages == first
            assert ro.min_offset("orders", 0) == 0
            assert ro.read_at(first[1].commitlog_offset) == first[1]


def test_reads_from_the_tier_while_uploads_and_retention_go_on(tier, tmp_store_dir,
                                                               small_chunks):
    """Threads reading the tiered history keep getting the right messages while the writer
    uploads new chunks (the metadata changes under them) and deletes local segments."""
    import threading
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 600)
        store.tier_sync(timeout_s=60)
        want = {k: v[:30] for k, v in local_history(store).items()}
        store.clean_expired(FAR)
        stop, errors, reads = threading.Event(), [], [0]

        def reader() -> None:
            while not stop.is_set():
                for (topic, q), msgs in want.items():
                    try:
                        got = store.get(topic, q, 0, 30).messages
                        assert got == msgs, (topic, q, len(got))
                        m = msgs[len(msgs) // 2]
                        assert store.read_at(m.commitlog_offset) == m
                    except Exception as exc:   # reported below, with the thread's view
                        errors.append(repr(exc))
                        return
                    reads[0] += 1
        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for i in range(4):
                fill(store, 300, start=600 + 300 * i)
                store.tier_sync(timeout_s=60)
                store.clean_expired(FAR)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not errors, errors[:3]
        assert reads[0] > 0 and store.log.min_offset() > 0


def test_tier_sync_cli_uses_the_remembered_tier(tier, tmp_store_dir):
    """A store without tiered/metadata.json (lost, or never written) still knows its tier:
    `strata tier sync DIR` uploads there with no --tier-url."""
    import shutil
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        store.tier.stop()                    # no upload, no metadata from this run
        store.tier = None
        fill(store, 50)
    shutil.rmtree(tmp_store_dir / "tiered", ignore_errors=True)
    r = strata_cmd("tier", "sync", tmp_store_dir)
    assert r.returncode == 0 and "uploaded 50 messages" in r.stdout, r.stderr
    assert tier.url in r.stdout.replace("\n", "")


def test_query_reads_only_the_tier_keys_below_the_local_files(tier, tmp_store_dir,
                                                              small_chunks):
    """A store's query asks the tier only for chunks that start below its local files: a key
    whose messages are all local fetches no .keys object."""
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        store.clean_expired(FAR)
        fill(store, 600, start=N)                 # on the tier and still local
        store.tier_sync(timeout_s=60)
        low = store.log.min_offset()
        fetched = []
        backend = store.tier.history.backend
        real_read = backend.read

        def counting_read(path, start=0, length=None):
            fetched.append(path)
            return real_read(path, start, length)
        backend.read = counting_read
        recent = N + 599
        got = store.query(TOPICS[recent % 2], f"k{recent}")
        assert [m.keys for m in got] == [(f"k{recent}",)] and got[0].commitlog_offset >= low
        keys_read = [p for p in fetched if p.endswith(".keys")]
        meta = store.tier.history.metadata
        starts = {f"queues/{q.topic}/{q.queue_id}/{c.first:020d}.keys": c.first_phys
                  for q in meta.queues.values() for c in q.chunks}
        assert keys_read and all(starts[p] < low for p in keys_read)
        assert len(keys_read) < sum(1 for p in starts if p.startswith(f"queues/{TOPICS[1]}/"))


def test_a_local_only_reader_answers_from_the_local_files(tier, tmp_store_dir, small_chunks):
    """``local_only=True`` (the Spark source's store handle: it reads the tier in tasks of its
    own) never answers from the tier."""
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        store.clean_expired(FAR)
        local_min = store.queues.get("orders", 0).min_offset()
        old = store.get("orders", 0, 0, 1).messages[0]
    with strata.MessageStore(tmp_store_dir, readonly=True, local_only=True) as ro:
        assert ro.min_offset("orders", 0) == local_min > 0
        r = ro.get("orders", 0, 0)
        assert r.status is strata.GetStatus.OFFSET_TOO_SMALL and r.next_offset == local_min
        assert ro.read_at(old.commitlog_offset) is None
        assert ro.first_commitlog_offset() == ro.log.min_offset() > 0
    from strata.spark.geometry import open_readonly
    with open_readonly(tmp_store_dir) as ro:
        assert ro.min_offset("orders", 0) == local_min
