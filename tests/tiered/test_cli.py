"""``strata tier stat|sync|verify DIR`` from the shell."""

from __future__ import annotations

import json
import subprocess
import sys

import strata
from strata.tiered.layout import chunk_path
from tier_helpers import fill, tier_config
from support import small_store_config


def strata_cmd(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)


def test_sync_stat_verify(tier, tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config()) as store:   # no tier yet
        fill(store, 120)
    r = strata_cmd("tier", "stat", tmp_store_dir)
    assert r.returncode == 1 and "has no tier yet" in r.stderr
    r = strata_cmd("tier", "sync", tmp_store_dir)
    assert r.returncode == 1 and "give --tier-url" in r.stderr
    args = ["--endpoint-url", tier.endpoint] if tier.endpoint else []
    r = strata_cmd("tier", "sync", "--tier-url", tier.url, *args, tmp_store_dir)
    assert r.returncode == 0, r.stderr
    assert "uploaded 120 messages" in r.stdout
    r = strata_cmd("tier", "stat", "--json", tmp_store_dir)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["reachable"] and doc["messages"] == 120 and doc["lag"] == 0
    assert doc["tier_generation"] == doc["generation"] >= 1
    with strata.open(tmp_store_dir, tier_config(tier)) as store:       # 30 more, not uploaded
        store.tier.stop()
        fill(store, 30, start=120)
        store.tier = None
    doc = json.loads(strata_cmd("tier", "stat", "--json", tmp_store_dir).stdout)
    assert doc["lag"] == 30
    r = strata_cmd("tier", "sync", tmp_store_dir)                       # the remembered tier
    assert r.returncode == 0 and "uploaded 30 messages" in r.stdout, r.stderr
    for extra in ([], ["--from-tier"]):
        r = strata_cmd("tier", "verify", *extra, tmp_store_dir)
        assert r.returncode == 0 and "150 messages" in r.stdout and "OK" in r.stdout, r.stderr
    b = tier.backend()
    path = chunk_path("audit", 1, 0, "log")
    raw = bytearray(b.read(path))
    raw[-10] ^= 1
    b.put(path, bytes(raw))
    r = strata_cmd("tier", "verify", tmp_store_dir)
    assert r.returncode == 1 and path in r.stdout and "1 problem" in r.stdout


def test_stat_shows_an_unreachable_tier(tmp_store_dir, s3_endpoint):
    from tier_helpers import free_port
    with strata.open(tmp_store_dir, small_store_config()) as store:
        fill(store, 10)
    url = f"http://127.0.0.1:{free_port()}"
    r = strata_cmd("tier", "sync", "--tier-url", "s3://bucket/p", "--endpoint-url", url,
                   "--timeout", "1", tmp_store_dir)
    assert r.returncode == 1 and "TierUnavailableError" in r.stderr and "127.0.0.1" in r.stderr
    assert "Traceback" not in r.stderr
