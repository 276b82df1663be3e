"""Keep the bytes recovery cuts from the commit log aside, in ``<store>/quarantine/``.

Recovery cuts only what it proved to be a torn tail; even so, the bytes are written (and
fsynced) to a quarantine file before a single one is zeroed, so an operator can recover them
(``read_quarantine``; the layout is in ``strata.format.quarantine`` and docs/recovery.md).
"""

from __future__ import annotations

from pathlib import Path

from strata.files.io import FileOps
from strata.files.layout import QUARANTINE_DIR
from strata.format.quarantine import QuarantinedPiece, decode_quarantine, encode_quarantine
from strata.format.segment import file_name


def keep_aside(store_dir: Path, pieces: list[QuarantinedPiece], file_ops: FileOps) -> str:
    """Write ``pieces`` to a new quarantine file, durably; returns its path relative to the
    store directory (``quarantine/commitlog-<first offset>.bin``, ``-1``, ``-2``... when a
    file of that name is there already). DiskFullError when there is no room."""
    folder = Path(store_dir) / QUARANTINE_DIR
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        file_ops.fsync_dir(folder.parent)
    stem = f"commitlog-{file_name(pieces[0].offset)}"
    name, n = f"{stem}.bin", 0
    while (folder / name).exists():
        n += 1
        name = f"{stem}-{n}.bin"
    file_ops.write_atomic(folder / name, encode_quarantine(pieces))
    return f"{QUARANTINE_DIR}/{name}"


def read_quarantine(path: Path) -> list[QuarantinedPiece]:
    """The pieces of the quarantine file at ``path``."""
    return decode_quarantine(Path(path).read_bytes(), str(path))
