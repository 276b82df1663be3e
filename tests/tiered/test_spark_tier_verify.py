"""``strata spark tier-verify DIR | --tier-url URL``: every counted chunk checked against the
metadata by a Spark job; each damaged object is named and the exit code is 1."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

import strata
from strata.cli.main import cli
from strata.spark.jobs.tier_verify import tier_verify
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadPolicy
from strata.tiered.layout import parse_chunk_path
from tier_helpers import fill, tier_config

pytestmark = pytest.mark.spark


@pytest.fixture
def small_chunks():
    tier_service.DEFAULT_POLICY = UploadPolicy(chunk_messages=40, commit_every=3)
    yield
    tier_service.DEFAULT_POLICY = None


def tiered_store(tier, path, n: int = 800) -> None:
    with strata.open(path, tier_config(tier)) as store:
        fill(store, n)
        store.tier_sync(timeout_s=60)


def summary(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])   # progress lines come before it


def test_a_sound_tier_verifies(spark, tier, tmp_store_dir, small_chunks):
    tiered_store(tier, tmp_store_dir)
    result = tier_verify(spark, tmp_store_dir)
    assert result.ok, result.problems
    s = result.summary
    assert s.messages == 800 and s.chunks > 16 and s.bytes > 800 * 60
    assert s.uncounted_objects == 0
    shutil.rmtree(tmp_store_dir)                          # the tier alone, by its own copy
    args = ["spark", "tier-verify", "--tier-url", tier.url, "--master", "local[2]"]
    if tier.endpoint:
        args += ["--endpoint-url", tier.endpoint]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert summary(r.output)["messages"] == 800 and summary(r.output)["problems"] == 0


def test_damaged_objects_are_each_named(spark, tmp_path, tmp_store_dir, small_chunks):
    tier_dir = tmp_path / "tier"
    tier = type("T", (), {"url": f"file://{tier_dir}", "endpoint": None})()
    tiered_store(tier, tmp_store_dir)
    objects = {k: sorted(p for p in tier_dir.rglob(f"*.{k}")
                         if parse_chunk_path(str(p.relative_to(tier_dir))))
               for k in ("log", "cq", "keys")}
    flipped, cut = objects["log"][3], objects["log"][7]
    data = bytearray(flipped.read_bytes())
    data[len(data) - 30] ^= 0x01                          # a body byte: only the CRC sees it
    flipped.write_bytes(bytes(data))
    cut.write_bytes(cut.read_bytes()[:-5])                # shorter than counted
    gone = objects["cq"][11]
    gone.unlink()
    keys = objects["keys"][13]
    data = bytearray(keys.read_bytes())
    data[0] ^= 0x80
    keys.write_bytes(bytes(data))
    r = CliRunner().invoke(cli, ["spark", "tier-verify", str(tmp_store_dir), "--master",
                                 "local[2]", "--json"])
    assert r.exit_code == 1, r.output
    problems = [json.loads(line) for line in r.output.strip().splitlines()[:-1]
                if line.startswith("{")]
    named = {(p["file"], p["kind"]) for p in problems}
    rel = lambda p: str(p.relative_to(tier_dir))            # noqa: E731
    assert (rel(flipped), "record") in named
    assert (rel(cut), "size") in named
    assert (rel(gone), "missing") in named
    assert (rel(keys), "keys") in named
    assert summary(r.output)["problems"] == len(problems) == 4
    record = next(p for p in problems if p["kind"] == "record")
    topic, qid, first, _ = parse_chunk_path(record["file"])
    assert first <= record["offset"] < first + 40 and "CRC32C" in record["detail"]


def test_bad_arguments_fail_before_spark(tmp_path, tmp_store_dir):
    runner = CliRunner()
    r = runner.invoke(cli, ["spark", "tier-verify"])
    assert r.exit_code == 2 and "one of them" in r.output
    r = runner.invoke(cli, ["spark", "tier-verify", str(tmp_path), "--tier-url",
                            f"file://{tmp_path}"])
    assert r.exit_code == 2 and "one of them" in r.output
    r = runner.invoke(cli, ["spark", "tier-verify", "--tier-url", "ftp://x/y"])
    assert r.exit_code == 1 and "--tier-url" in r.output and "unknown scheme" in r.output
    r = runner.invoke(cli, ["spark", "tier-verify", "--tier-url", f"file://{tmp_path}/none"])
    assert r.exit_code == 1 and "holds no strata tier" in r.output
    r = runner.invoke(cli, ["spark", "tier-verify", "--endpoint-url", "http://127.0.0.1:1",
                            str(tmp_path)])
    assert r.exit_code == 2 and "--tier-url" in r.output
    with strata.open(tmp_store_dir, strata.StoreConfig(segment_size=1 << 20)) as store:
        store.put(strata.Message("t", b"x"))
    r = runner.invoke(cli, ["spark", "tier-verify", str(tmp_store_dir)])
    assert r.exit_code == 1 and "never uploaded" in r.output
