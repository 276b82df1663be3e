"""The store remembers its file geometry (config/geometry.json): an open without a config goes
on with the sizes the store was made with, even before it holds a single file of that size."""

from __future__ import annotations

import json

import pytest

import strata
from strata.errors import CorruptStoreError
from strata.index.key_index import DEFAULT_ENTRIES, DEFAULT_SLOTS
from strata.store.geometry import GEOMETRY_FILE, stored_config

from support import SMALL_SEGMENT, small_store_config


def _segment_file_sizes(path) -> set[int]:
    return {p.stat().st_size for p in (path / "commitlog").iterdir() if p.name.isdigit()}


def test_an_empty_store_reopened_without_config_keeps_its_sizes(tmp_path):
    path = tmp_path / "s"
    with strata.open(path, small_store_config()):
        pass                                              # made, but no segment written yet
    with strata.open(path) as store:
        assert store.config.segment_size == SMALL_SEGMENT
        assert store.config.consume_queue_units == 4096
        assert (store.config.index_slots, store.config.index_entries) == (1024, 8192)
        store.put(strata.Message("t", b"x"))
    assert max(_segment_file_sizes(path)) < 1 << 20    # not a default 1 GiB segment


def test_a_store_without_the_file_gets_its_sizes_from_its_files(tmp_path):
    path = tmp_path / "s"
    with strata.open(path, small_store_config()) as store:
        store.put_batch([strata.Message("t", b"x", keys=("k",)) for _ in range(10)])
    (path / GEOMETRY_FILE).unlink()                       # as written by an older strata
    cfg = stored_config(path)
    assert (cfg.segment_size, cfg.consume_queue_units, cfg.index_slots, cfg.index_entries) == \
        (SMALL_SEGMENT, 4096, 1024, 8192)
    with strata.open(path) as store:                      # and a writer writes it again
        assert store.config.segment_size == SMALL_SEGMENT
    assert json.loads((path / GEOMETRY_FILE).read_text())["segment_size"] == SMALL_SEGMENT


def test_key_index_files_that_start_small_do_not_make_the_geometry_small(tmp_path):
    path = tmp_path / "s"
    with strata.open(path, small_store_config(index_slots=DEFAULT_SLOTS,
                                              index_entries=DEFAULT_ENTRIES)) as store:
        store.put_batch([strata.Message("t", b"x", keys=("k",)) for _ in range(10)])
    (path / GEOMETRY_FILE).unlink()                       # as written by an older strata
    cfg = stored_config(path)
    assert (cfg.segment_size, cfg.index_slots, cfg.index_entries) == \
        (SMALL_SEGMENT, DEFAULT_SLOTS, DEFAULT_ENTRIES)


def test_an_explicit_config_wins_and_is_remembered(tmp_path):
    path = tmp_path / "s"
    with strata.open(path, small_store_config()):
        pass
    with strata.open(path, small_store_config(segment_size=2 * SMALL_SEGMENT)):
        pass
    with strata.open(path) as store:
        assert store.config.segment_size == 2 * SMALL_SEGMENT


def test_a_read_only_open_writes_nothing(tmp_path):
    path = tmp_path / "s"
    with strata.open(path, small_store_config()):
        pass
    (path / GEOMETRY_FILE).unlink()
    with strata.open(path, readonly=True):
        pass
    assert not (path / GEOMETRY_FILE).exists()


@pytest.mark.parametrize("damage", [b"{not json", b'{"segment_size": 1}', b'{"segment_size": "x"}'])
def test_a_damaged_geometry_file_is_named_and_an_explicit_config_rewrites_it(tmp_path, damage):
    path = tmp_path / "s"
    with strata.open(path, small_store_config()) as store:
        store.put(strata.Message("t", b"kept"))
    (path / GEOMETRY_FILE).write_bytes(damage)
    with pytest.raises(CorruptStoreError, match="geometry.json"):
        strata.open(path)
    with strata.open(path, small_store_config()) as store:
        assert store.get("t", 0, 0, 10).messages[0].body == b"kept"
    with strata.open(path) as store:
        assert store.config.segment_size == SMALL_SEGMENT
