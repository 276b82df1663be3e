"""``strata tier stat|sync|verify DIR`` from the shell."""

from __future__ import annotations

import json
import subprocess

import strata
from strata.tiered.layout import chunk_path
from tier_helpers import fill, new_bucket, tier_config
from support import run_strata, small_store_config


def strata_cmd(*args) -> subprocess.CompletedProcess:
    return run_strata(list(args))


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


def _no_credentials_env(tmp_path) -> dict:
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"))
    return env


def test_sync_fails_fast_for_what_waiting_cannot_fix(s3_endpoint, tmp_path, tmp_store_dir):
    """Issue 26.4: no bucket, or no credentials, is one clear error at once, not an hour of
    retries (--timeout is left at its default of 3600 s: the subprocess's 120 s bound would
    end a run that retried)."""
    other = tmp_path / "other"       # a store remembers the tier it was first synced to
    for path in (tmp_store_dir, other):
        with strata.open(path, small_store_config()) as store:
            fill(store, 20)
    r = strata_cmd("tier", "sync", "--tier-url", "s3://no-such-bucket-here/p",
                   "--endpoint-url", s3_endpoint, other)
    assert r.returncode == 1 and "TierRefusedError" in r.stderr, r.stderr
    assert "no bucket 'no-such-bucket-here'" in r.stderr and "Traceback" not in r.stderr
    bucket = new_bucket(s3_endpoint)
    r = run_strata(["tier", "sync", "--tier-url", f"s3://{bucket}/p", "--endpoint-url",
                    s3_endpoint, tmp_store_dir], env=_no_credentials_env(tmp_path))
    assert r.returncode == 1 and "no S3 credentials" in r.stderr, r.stderr
    r = strata_cmd("tier", "sync", "--tier-url", f"s3://{bucket}/p", "--endpoint-url",
                   s3_endpoint, tmp_store_dir)                 # with them: it uploads
    assert r.returncode == 0 and "uploaded 20 messages" in r.stdout, r.stderr
