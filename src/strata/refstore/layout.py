"""Names of the files a ref store keeps in its directory, and how to list them."""

from __future__ import annotations

import os

DATA_SUFFIX = ".rsd"        # data file: records, appended
TEMP_SUFFIX = ".rst"        # GC temporary file: the left file's scattered live records
INDEX_NAME = "index.rsi"    # clean shutdown: message index
SUMMARY_NAME = "summary.rss"  # clean shutdown: file summary
CLEAN_NAME = "clean.rsc"    # clean shutdown marker, written last: client refs + checksums
LOCK_NAME = "refstore.lock"
SNAPSHOT_TEMP_SUFFIX = ".tmp"  # a snapshot file being written, renamed into place when whole

_DIGITS = 10


def data_name(number: int) -> str:
    return f"{number:0{_DIGITS}d}{DATA_SUFFIX}"


def temp_name(number: int) -> str:
    return f"{number:0{_DIGITS}d}{TEMP_SUFFIX}"


def data_path(directory: str, number: int) -> str:
    return os.path.join(directory, data_name(number))


def temp_path(directory: str, number: int) -> str:
    return os.path.join(directory, temp_name(number))


def _numbered(directory: str, suffix: str) -> list[int]:
    found = []
    for name in os.listdir(directory):
        if name.endswith(suffix):
            stem = name[:-len(suffix)]
            if len(stem) == _DIGITS and stem.isdigit():
                found.append(int(stem))
    return sorted(found)


def list_data_files(directory: str) -> list[int]:
    """Numbers of the data files present, oldest first."""
    return _numbered(directory, DATA_SUFFIX)


def list_temp_files(directory: str) -> list[int]:
    """Numbers of leftover GC temporary files."""
    return _numbered(directory, TEMP_SUFFIX)


def owned_names(directory: str) -> list[str]:
    """Every file in ``directory`` that a ref store writes (the lock file excepted)."""
    fixed = {INDEX_NAME, SUMMARY_NAME, CLEAN_NAME}
    out = []
    for name in os.listdir(directory):
        base = name[:-len(SNAPSHOT_TEMP_SUFFIX)] if name.endswith(SNAPSHOT_TEMP_SUFFIX) else name
        if base in fixed:
            out.append(name)
            continue
        for suffix in (DATA_SUFFIX, TEMP_SUFFIX):
            if base.endswith(suffix):
                stem = base[:-len(suffix)]
                if len(stem) == _DIGITS and stem.isdigit():
                    out.append(name)
    return sorted(out)
