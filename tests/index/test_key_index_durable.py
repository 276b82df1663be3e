"""A key-index file is durable before its name appears: header and size fsynced, then the
rename, then the directory fsynced (a power loss right after creation used to leave a named
file with a zeroed header)."""

from __future__ import annotations

import os

from strata.index.key_index import KeyIndex

T0 = 1_700_000_000_000


def test_creation_syncs_file_then_renames_then_syncs_directory(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", str(dst)))
        real_rename(src, dst)

    ki = KeyIndex(tmp_path / "index", slots=4, entries=11)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    ki.put_batch([("T#k", 100, T0)])
    monkeypatch.undo()
    (name,) = os.listdir(tmp_path / "index")
    final = str(tmp_path / "index" / name)
    assert events == [("fsync", final + ".tmp"), ("rename", final),
                      ("fsync", str(tmp_path / "index"))]
    ki.close()
