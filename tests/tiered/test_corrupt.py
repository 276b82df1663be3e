"""Damaged tier objects are detected (record CRCs, the .cq/.keys CRCs in the metadata, sizes)
and named; their messages are never served."""

from __future__ import annotations

import pytest

import strata
from strata.tiered.errors import CorruptTierError
from strata.tiered.layout import chunk_path
from strata.tiered.reader import TieredQueueReader
from tier_helpers import fill, tier_config


@pytest.fixture
def uploaded(tier, tmp_store_dir):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 160)
        store.tier_sync()
    return tier.backend()


def damage(backend, path: str, at: int | None = None, cut: int | None = None) -> None:
    raw = bytearray(backend.read(path))
    if at is not None:
        raw[at] ^= 0x40
    if cut is not None:
        raw = raw[:cut]
    backend.put(path, bytes(raw))


def test_a_flipped_body_bit_is_caught_by_the_record_crc(uploaded):
    path = chunk_path("orders", 0, 0, "log")
    reader = TieredQueueReader.from_tier(uploaded)
    first = reader.get("orders", 0, 0, 3)
    damage(uploaded, path, at=first[0].size + first[1].size - 20)   # in record 1's body
    reader = TieredQueueReader.from_tier(uploaded)
    assert reader.get("orders", 0, 0, 1) == first[:1]               # record 0 is intact
    with pytest.raises(CorruptTierError, match=r"orders/0 offset 1 .*fails its checks") as exc:
        reader.get("orders", 0, 0, 3)
    assert exc.value.path == path and path in str(exc.value)
    with pytest.raises(CorruptTierError):
        reader.get("orders", 0, 1, 1)
    report = reader.verify()
    assert not report.ok and len(report.problems) == 1 and path in report.problems[0]


def test_a_damaged_unit_file_is_caught_by_its_crc(uploaded):
    path = chunk_path("audit", 1, 0, "cq")
    damage(uploaded, path, at=3)
    reader = TieredQueueReader.from_tier(uploaded)
    with pytest.raises(CorruptTierError, match="fails its CRC32C") as exc:
        reader.get("audit", 1, 0, 1)
    assert exc.value.path == path
    assert reader.get("audit", 3, 0, 1)                               # other queues serve
    assert [p for p in reader.verify().problems if path in p]


def test_a_damaged_key_file_is_caught(uploaded):
    path = chunk_path("orders", 2, 0, "keys")
    damage(uploaded, path, at=30)
    reader = TieredQueueReader.from_tier(uploaded)
    with pytest.raises(CorruptTierError, match="fails its CRC32C"):
        reader.query("orders", "k2")
    assert reader.get("orders", 2, 0, 5)                              # records are fine


def test_a_truncated_or_missing_object_is_named(uploaded):
    path = chunk_path("orders", 4, 0, "log")
    damage(uploaded, path, cut=100)
    reader = TieredQueueReader.from_tier(uploaded)
    with pytest.raises(CorruptTierError, match="shorter than the metadata says"):
        reader.get("orders", 4, 0, 50)
    assert any("holds 100 bytes" in p for p in reader.verify().problems)
    uploaded.delete(chunk_path("orders", 6, 0, "cq"))
    reader = TieredQueueReader.from_tier(uploaded)
    with pytest.raises(CorruptTierError, match="missing although the metadata counts it"):
        reader.get("orders", 6, 0, 1)


def test_a_record_of_another_queue_is_not_served(uploaded):
    """Intact bytes in the wrong place (objects swapped) fail the offset/queue check."""
    a, b = chunk_path("orders", 0, 0, "log"), chunk_path("orders", 2, 0, "log")
    raw_a, raw_b = uploaded.read(a), uploaded.read(b)
    uploaded.put(a, raw_b + raw_a[len(raw_b):] if len(raw_b) < len(raw_a) else raw_b)
    reader = TieredQueueReader.from_tier(uploaded)
    with pytest.raises(CorruptTierError, match=r"orders/0 offset 0 .*(holds orders/2|fails)"):
        reader.get("orders", 0, 0, 1)
