"""A file missing from the middle of the commit log or of a consume queue stops the open with
an error naming the gap (and, for a consume queue, the way to rebuild it); nothing is changed."""

from __future__ import annotations

import pytest

import strata
from strata.errors import CorruptStoreError

from support import small_store_config


def _store(tmp_path):
    path = tmp_path / "s"
    cfg = small_store_config(consume_queue_units=64)
    with strata.open(path, cfg) as store:
        store.create_topic("t", queues=1)
        for _ in range(6):
            store.put_batch([strata.Message("t", b"x" * 700) for _ in range(100)])
    return path, cfg


@pytest.mark.parametrize("where", ["consumequeue/t/0", "commitlog"])
def test_a_missing_middle_file_is_named(tmp_path, where):
    path, cfg = _store(tmp_path)
    files = sorted(p for p in (path / where).iterdir() if p.name.isdigit())
    assert len(files) >= 3
    files[1].unlink()
    before = sorted(p.name for p in (path / where).iterdir())
    with pytest.raises(CorruptStoreError, match="a file is missing") as err:
        strata.open(path, cfg)
    assert f"segment {files[2].name} does not follow {files[0].name}" in str(err.value)
    assert ("rebuild-index" in str(err.value)) == (where != "commitlog")
    assert sorted(p.name for p in (path / where).iterdir()) == before   # nothing touched
