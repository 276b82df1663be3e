"""A backend that fails, hangs or dies mid-upload, and SIGKILL of the store during uploads:
afterwards the tier holds every confirmed message once — no gap, no duplicate, no counted
orphan — and every acknowledged message is readable."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import textwrap
import time

import pytest

import strata
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadPolicy
from strata.testing.tier_faults import Fault, FaultyBackend
from strata.tiered.reader import TieredQueueReader
from tier_helpers import check_tier_consistent, fill, local_history, tier_config, tier_history

FAST = UploadPolicy(chunk_messages=30, commit_every=2, retry_backoff_s=(0.05, 0.2))


@pytest.fixture
def faulty():
    """Every store opened in the test gets a FaultyBackend; the test sets its fault."""
    made: list[FaultyBackend] = []

    def wrap(b):
        made.append(FaultyBackend(b))
        return made[-1]
    tier_service.BACKEND_HOOK = wrap
    tier_service.DEFAULT_POLICY = FAST
    yield made
    tier_service.BACKEND_HOOK = None
    tier_service.DEFAULT_POLICY = None


@pytest.mark.parametrize("fault", [
    Fault(at_put=3, mode="error", times=4),                       # a chunk's objects fail
    Fault(at_put=2, mode="error", path_contains=".cq"),           # .log went up, .cq failed
    Fault(at_put=1, mode="error", times=2, path_contains="meta/"),  # the metadata copy fails
    Fault(at_put=4, mode="hang", hang_s=0.3, times=2),            # timeouts
], ids=["errors", "cq-after-log", "metadata-copy", "timeouts"])
def test_failing_backend_is_retried_without_gap_or_duplicate(tier, tmp_store_dir, faulty,
                                                             fault):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        faulty[0].fault = fault
        fill(store, 400)
        store.tier_sync(timeout_s=60)
        assert faulty[0].failures >= 1
        local = local_history(store)
        reader = store.tier.reader()
        assert tier_history(reader, local) == local
        check_tier_consistent(tier.backend(), reader)
        assert store.tier.stat().last_error is None


def test_failure_counts_no_chunk(tier, tmp_store_dir, faulty):
    """Objects that went up before a failure are not counted until the metadata says so."""
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        faulty[0].fault = Fault(at_put=1, mode="error", times=10**6, path_contains=".cq")
        fill(store, 50)
        with pytest.raises(strata.errors.StrataError, match="injected"):
            store.tier_sync(timeout_s=1)
        assert store.tier.stat().uploaded.chunks == 0
        assert all(q.lag > 0 or q.local_max == 0 for q in store.tier.stat().queues)
        faulty[0].fault = None
        store.tier_sync(timeout_s=30)
        check_tier_consistent(tier.backend(), store.tier.reader())


CHILD = textwrap.dedent('''
    import json, sys
    sys.path[:0] = {paths!r}
    import strata
    from strata.tiered import service
    from strata.tiered.dispatcher import UploadPolicy
    from strata.testing.tier_faults import Fault, FaultyBackend
    from tier_helpers import fill, tier_config
    from tier_helpers import Tier
    args = json.loads(sys.argv[1])
    fault = Fault(**args["fault"]) if args["fault"] else None
    service.BACKEND_HOOK = lambda b: FaultyBackend(b, fault)
    service.DEFAULT_POLICY = UploadPolicy(chunk_messages=25, commit_every=2,
                                          retry_backoff_s=(0.05, 0.2))
    tier = Tier(**args["tier"])
    with strata.open(args["dir"], tier_config(tier)) as store:
        for round in range(1000):
            fill(store, 150, start=round * 150)
            store.flush()
            print(f"acked {{(round + 1) * 150}}", flush=True)
            store.tier_sync(timeout_s=60)
    ''')


def run_child(tier, directory, fault: dict | None, kill_after_s: float | None) -> int:
    """Run the child until its fault kills it (or the parent does after ``kill_after_s``);
    returns how many messages it had acknowledged."""
    import os
    here = os.path.dirname(__file__)
    src = CHILD.format(paths=[here, os.path.join(here, "..")])
    arg = json.dumps({"dir": str(directory), "fault": fault,
                      "tier": {"kind": tier.kind, "url": tier.url, "endpoint": tier.endpoint}})
    proc = subprocess.Popen([sys.executable, "-c", src, arg], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    acked = 0
    try:
        if kill_after_s is not None:
            first = proc.stdout.readline()
            assert first.startswith("acked"), proc.stderr.read()
            acked = int(first.split()[1])
            time.sleep(kill_after_s)
            proc.kill()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [ln for ln in out.splitlines() if ln.startswith("acked")]
    acked = max([acked] + [int(ln.split()[1]) for ln in lines])
    assert proc.returncode == -9, f"child ended on its own ({proc.returncode}): {err}"
    return acked


def check_after_crash(tier, directory, acked: int) -> None:
    with strata.open(directory, tier_config(tier)) as store:
        store.tier_sync(timeout_s=60)
        local = local_history(store)
        assert sum(len(v) for v in local.values()) >= acked
        reader = store.tier.reader()
        assert tier_history(reader, local) == local
        check_tier_consistent(tier.backend(), reader)
    # and a reader of the tier's own metadata copy sees the same
    reader = TieredQueueReader.from_tier(tier.backend())
    assert tier_history(reader, local) == local


@pytest.mark.parametrize("fault", [
    {"at_put": 2, "mode": "kill", "path_contains": ".cq"},     # between a chunk's objects
    {"at_put": 7, "mode": "kill", "path_contains": ".log"},    # a few chunks in
    {"at_put": 2, "mode": "kill", "path_contains": "meta/"},   # after a local commit
], ids=["mid-chunk", "later-chunk", "metadata-copy"])
def test_sigkill_during_upload(tier, tmp_store_dir, fault):
    acked = run_child(tier, tmp_store_dir, fault, None)
    assert acked >= 150
    check_after_crash(tier, tmp_store_dir, acked)


def test_sigkill_at_random_moments(tier, tmp_path):
    rnd = random.Random(1313)
    for i in range(3):
        directory = tmp_path / f"s{i}"
        own = dataclasses.replace(tier, url=f"{tier.url}/{i}")   # a tier per store
        acked = run_child(own, directory, None, rnd.uniform(0.0, 0.6))
        check_after_crash(own, directory, acked)


def test_objects_an_interrupted_run_left_are_removed(tier, tmp_store_dir):
    """A run killed after uploading chunks it never counted leaves objects past the counted
    end, under names the next run (with other chunk sizes) may never write again: the next
    start deletes them."""
    cfg = tier_config(tier)
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 100)
        store.tier_sync()
        nxt = store.tier.meta.meta.queue("orders", 0).next_offset
    b = tier.backend()
    stray = [f"queues/orders/0/{nxt:020d}.log", f"queues/orders/0/{nxt + 5:020d}.log",
             f"queues/orders/0/{nxt + 5:020d}.cq", f"queues/newtopic/3/{0:020d}.keys"]
    for p in stray:
        b.put(p, b"left by a killed run")
    b.put("queues/orders/0/notes.txt", b"not a chunk object: left alone")
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 100, start=100)
        store.tier_sync()
        reader = store.tier.reader()
        check_tier_consistent(b, reader)
        assert tier_history(reader, local_history(store)) == local_history(store)
    assert b.read("queues/orders/0/notes.txt") == b"not a chunk object: left alone"
