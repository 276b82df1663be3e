"""Shared fixtures for the whole suite. Keep them small and generic; layer-specific helpers
belong in the test module (or a conftest.py in that layer's folder)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import strata

KiB = 1 << 10
MiB = 1 << 20

SMALL_SEGMENT = 64 * KiB


def body_for(seq: int, size: int = 100) -> bytes:
    """A deterministic body for sequence number ``seq``: tests recompute it to check integrity."""
    seed = hashlib.blake2b(seq.to_bytes(8, "little"), digest_size=16).digest()
    return (seed * (size // len(seed) + 1))[:size]


def make_message(seq: int = 0, *, topic: str = "t", size: int = 100, **kw) -> strata.Message:
    """A message whose body is ``body_for(seq, size)`` and whose key is ``k<seq>``."""
    kw.setdefault("keys", (f"k{seq}",))
    return strata.Message(topic, body_for(seq, size), **kw)


@pytest.fixture
def tmp_store_dir(tmp_path: Path) -> Path:
    """A path where a store may be created (the directory does not exist yet)."""
    return tmp_path / "store"


def small_store_config(**overrides) -> strata.StoreConfig:
    """64 KiB segments, small consume-queue and key-index files, no page pre-faulting:
    many segments from few messages, and a store that opens fast."""
    kw = dict(segment_size=SMALL_SEGMENT, prefault=False, consume_queue_units=4096,
              index_slots=1024, index_entries=8192)
    kw.update(overrides)
    return strata.StoreConfig(**kw)


@pytest.fixture
def small_config() -> strata.StoreConfig:
    return small_store_config()
