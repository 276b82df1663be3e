"""A file missing from the middle of the commit log stops the open with an error naming the
gap; nothing is changed. One missing from a consume queue (derived from the log) does not: the
files after the gap are set aside and the queue rebuilt from the log."""

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


@pytest.mark.parametrize("where", ["commitlog"])
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


def test_a_missing_middle_queue_file_is_rebuilt(tmp_path):
    path, cfg = _store(tmp_path)
    qdir = path / "consumequeue" / "t" / "0"
    files = sorted(p for p in qdir.iterdir() if p.name.isdigit())
    assert len(files) >= 3
    files[1].unlink()
    with strata.open(path, cfg) as store:
        (line,) = [r for r in store.recovery_report.repaired_files if "consume queue t/0" in r]
        assert f"segment {files[2].name} does not follow {files[0].name}" in line
        assert store.max_offset("t", 0) == 600
        got, off = [], 0
        while off < 600:
            r = store.get("t", 0, off, 100)
            got += [m.queue_offset for m in r.messages]
            off = r.next_offset
        assert got == list(range(600))
    assert sorted(p.name for p in qdir.iterdir() if p.name.isdigit()) == \
        [f.name for f in files]
