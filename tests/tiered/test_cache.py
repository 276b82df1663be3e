"""The tier read cache stays within its bound and serves repeated reads without fetching."""

from __future__ import annotations

import os

import pytest

from strata.tiered.cache import BlockCache


def test_reads_are_exact_and_bounded():
    data = {"a": os.urandom(10_000), "b": os.urandom(3_000)}
    fetched = []

    def fetch(path, start, length):
        fetched.append((path, start, length))
        return data[path][start:start + length]

    c = BlockCache(max_bytes=4096, block_size=1024)
    for path, start, length in [("a", 0, 10), ("a", 1000, 100), ("a", 5000, 3000),
                                ("b", 2900, 500), ("a", 9990, 10), ("a", 0, 10_000)]:
        assert c.read(path, start, length, fetch) == data[path][start:start + length]
        assert c.cached_bytes <= 4096
    c = BlockCache(max_bytes=4096, block_size=1024)
    c.read("a", 0, 10_000, fetch)            # ten blocks fetched; the last four are kept
    assert c.cached_bytes == 3 * 1024 + 784
    fetched.clear()
    assert c.read("a", 6 * 1024, 3000, fetch) == data["a"][6 * 1024:6 * 1024 + 3000]
    assert fetched == []
    c.read("a", 0, 3000, fetch)                                 # three blocks, one fetch
    assert fetched == [("a", 0, 3072)]
    c.drop("a")
    assert c.cached_bytes == 0 or all(k[0] != "a" for k in c._blocks)


def test_a_cache_smaller_than_a_block_is_refused():
    with pytest.raises(ValueError, match="smaller than one block"):
        BlockCache(max_bytes=100, block_size=1024)
