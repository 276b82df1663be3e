"""Local retention with a tier deletes only what the tier durably holds: an unreachable tier
keeps expired segments on disk until it is back and synced; only disk pressure (or
``force``) deletes them first, logged and counted; a SIGKILL between upload and local delete
loses nothing."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta

import pytest

import strata
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadPolicy
from strata.testing.tier_faults import Fault, FaultyBackend
from support import body_for
from tier_helpers import TOPICS, fill, local_history, tier_config

FAR = int((datetime.now() + timedelta(days=30)).timestamp() * 1000)   # every segment expired
DOWN = Fault(at_put=1, mode="error", times=10**9)                      # every write fails


@pytest.fixture
def faulty():
    made: list[FaultyBackend] = []

    def wrap(b):
        made.append(FaultyBackend(b))
        return made[-1]
    tier_service.BACKEND_HOOK = wrap
    tier_service.DEFAULT_POLICY = UploadPolicy(chunk_messages=40, commit_every=2,
                                               retry_backoff_s=(0.05, 0.2))
    yield made
    tier_service.BACKEND_HOOK = None
    tier_service.DEFAULT_POLICY = None


def test_unreachable_tier_keeps_expired_segments_until_synced(tier, tmp_store_dir, faulty):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        faulty[0].fault = DOWN
        fill(store, 1200)
        store.wait_dispatched()
        before = local_history(store)
        segments = len(store.log.segments.segments)
        assert segments >= 4
        assert store.clean_expired(FAR) == 0                  # expired, but not on the tier
        assert store.retention.kept_for_tier
        assert len(store.log.segments.segments) == segments and store.log.min_offset() == 0
        faulty[0].fault = None                               # the tier is back
        store.tier_sync(timeout_s=60)
        assert store.clean_expired(FAR) == segments - 1      # all but the active one
        assert store.log.min_offset() > 0 and not store.retention.kept_for_tier
        assert local_history(store) == before                # the old ones from the tier
        assert store.tier.stat().deleted_before_upload == 0


def test_partly_uploaded_segments_stay(tier, tmp_store_dir, faulty):
    """A segment goes only when every queue's messages in it are on the tier."""
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 600)
        store.tier_sync(timeout_s=60)
        faulty[0].fault = DOWN
        fill(store, 600, start=600)                          # these stay local only
        store.wait_dispatched()
        uploaded_end = max(c.end_phys for q in store.tier.meta.meta.queues.values()
                           for c in q.chunks)
        store.clean_expired(FAR)
        assert store.retention.kept_for_tier
        first = store.log.segments.segments[0]
        assert first.base_offset <= uploaded_end < first.end_offset or \
            first.base_offset == uploaded_end
        assert store.get("orders", 0, 0).status is strata.GetStatus.FOUND


def test_disk_pressure_deletes_anyway_logged_and_counted(tier, tmp_store_dir, faulty, caplog):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        faulty[0].fault = DOWN
        fill(store, 1200)
        store.wait_dispatched()
        cfg = store.config
        store.retention.disk_usage = lambda: (cfg.disk_clean_forcibly_ratio +
                                              cfg.disk_warning_ratio) / 2
        with caplog.at_level(logging.ERROR, logger="strata.store.retention"):
            deleted = store.clean_expired(FAR)
        assert deleted >= 3
        assert store.tier.stat().deleted_before_upload == deleted
        assert sum("BEFORE THE TIER HELD IT" in r.getMessage() for r in caplog.records) == deleted
        store.retention.disk_usage = lambda: 0.1
        fill(store, 500, start=1200)
        store.wait_dispatched()
        assert store.clean_expired(FAR, force=True) >= 1     # an operator's force counts too
        assert store.tier.stat().deleted_before_upload > deleted


CHILD = textwrap.dedent('''
    import json, sys
    sys.path[:0] = {paths!r}
    import strata
    from strata.tiered import service
    from strata.tiered.dispatcher import UploadPolicy
    from strata.testing.tier_faults import Fault, FaultyBackend
    from tier_helpers import Tier, fill, tier_config
    args = json.loads(sys.argv[1])
    fault = Fault(**args["fault"]) if args["fault"] else None
    service.BACKEND_HOOK = lambda b: FaultyBackend(b, fault)
    service.DEFAULT_POLICY = UploadPolicy(chunk_messages=25, commit_every=2, max_delay_s=0.0,
                                          interval_s=0.01, retry_backoff_s=(0.05, 0.2))
    with strata.open(args["dir"], tier_config(Tier(**args["tier"]))) as store:
        for round in range(1000):
            fill(store, 150, start=round * 150)
            store.flush()
            print(f"acked {{(round + 1) * 150}}", flush=True)
            store.clean_expired(args["far"])       # races the background uploads
            if round % 2:
                store.tier_sync(timeout_s=60)
                store.clean_expired(args["far"])
    ''')


def run_child(tier, directory, fault: dict | None, kill_after_s: float | None) -> int:
    """Run the child until its fault kills it (or the parent does); returns how many
    messages it had acknowledged."""
    here = os.path.dirname(__file__)
    src = CHILD.format(paths=[here, os.path.join(here, "..")])
    arg = json.dumps({"dir": str(directory), "fault": fault, "far": FAR,
                      "tier": {"kind": tier.kind, "url": tier.url, "endpoint": tier.endpoint}})
    proc = subprocess.Popen([sys.executable, "-c", src, arg], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        if kill_after_s is not None:
            first = proc.stdout.readline()
            assert first.startswith("acked"), proc.stderr.read()
            time.sleep(kill_after_s)
            proc.kill()
            out, err = proc.communicate(timeout=120)
            out = first + out
        else:
            out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -9, f"child ended on its own ({proc.returncode}): {err}"
    return max(int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("acked"))


def check_nothing_lost(tier, directory, acked: int) -> bool:
    """Every acknowledged message is readable through the store, once, intact; returns
    whether retention had deleted local segments."""
    with strata.open(directory, tier_config(tier)) as store:
        deleted = store.log.min_offset() > 0
        seqs = []
        for (topic, q), msgs in local_history(store).items():
            assert store.min_offset(topic, q) == 0
            for m in msgs:
                seq = int(m.keys[0][1:])
                assert m.topic == TOPICS[seq % 2] and m.body == body_for(seq, 60 + seq % 300)
                seqs.append(seq)
        assert len(seqs) == len(set(seqs)) and set(range(acked)) <= set(seqs)
    return deleted


@pytest.mark.parametrize("fault", [
    # (the 20th metadata copy comes after ~20 rounds, retention has deleted segments by then)
    {"at_put": 20, "mode": "kill", "path_contains": "meta/"},  # committed locally, not copied
    {"at_put": 200, "mode": "kill", "path_contains": ".log"},  # mid-upload
], ids=["before-metadata-copy", "mid-upload"])
def test_sigkill_between_upload_and_local_delete(tier, tmp_store_dir, fault):
    acked = run_child(tier, tmp_store_dir, fault, None)
    assert check_nothing_lost(tier, tmp_store_dir, acked)


def test_sigkill_at_random_moments_loses_nothing(tier, tmp_path):
    rnd = random.Random(1313)
    deleted = []
    for i in range(3):
        own = type(tier)(tier.kind, f"{tier.url}/{i}", tier.endpoint)   # a tier per store
        directory = tmp_path / f"s{i}"
        acked = run_child(own, directory, None, rnd.uniform(0.5, 3.0))
        deleted.append(check_nothing_lost(own, directory, acked))
    assert any(deleted)          # retention had run in some of them


def test_get_steps_over_what_was_deleted_before_upload(tier, tmp_store_dir, faulty):
    """Disk pressure deleted messages the tier never got: the tier's history has a gap, and
    a consumer reading from 0 is led over it (OFFSET_FOUND_NULL) to every message there is."""
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 400)
        store.tier_sync(timeout_s=60)
        faulty[0].fault = DOWN
        fill(store, 800, start=400)
        store.wait_dispatched()
        cfg = store.config
        store.retention.disk_usage = lambda: (cfg.disk_clean_forcibly_ratio +
                                              cfg.disk_warning_ratio) / 2
        assert store.clean_expired(FAR) >= 3
        store.retention.disk_usage = lambda: 0.1
        faulty[0].fault = None
        fill(store, 600, start=1200)
        store.tier_sync(timeout_s=60)
        store.clean_expired(FAR)                  # now the tier holds both sides of the gap
        seqs, nulls = [], 0
        for topic in TOPICS:
            for q in range(store.queue_count(topic)):
                assert store.min_offset(topic, q) == 0
                off, calls = 0, 0
                while off < store.max_offset(topic, q):
                    r = store.get(topic, q, off, 50)
                    nulls += r.status is strata.GetStatus.OFFSET_FOUND_NULL
                    assert r.next_offset > off
                    seqs += [int(m.keys[0][1:]) for m in r.messages]
                    off, calls = r.next_offset, calls + 1
        assert nulls >= 1 and len(seqs) == len(set(seqs))
        assert set(range(400)) | set(range(1200, 1800)) <= set(seqs) < set(range(1800))
        assert sum(q.skipped for q in store.tier.stat().queues) == 1800 - len(seqs)
