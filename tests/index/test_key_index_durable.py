"""A key-index file is durable before its name appears: header and size fsynced, then the
rename, then the directory fsynced (a power loss right after creation used to leave a named
file with a zeroed header)."""

from __future__ import annotations

import os

from strata.index.key_index import KeyIndex
from strata.testing.faults import RecordingFileOps, installed

T0 = 1_700_000_000_000


def test_creation_syncs_file_then_renames_then_syncs_directory(tmp_path):
    ki = KeyIndex(tmp_path / "index", slots=4, entries=11)
    with installed(RecordingFileOps()) as ops:   # the seam every file operation goes through
        ki.put_batch([("T#k", 100, T0)])
    (name,) = os.listdir(tmp_path / "index")
    final = str(tmp_path / "index" / name)
    assert [e for e in ops.events if e[0] != "fallocate"] == [
        ("fsync", final + ".tmp"), ("rename", final), ("fsync_dir", str(tmp_path / "index"))]
    ki.close()
