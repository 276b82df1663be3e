"""The file summary: per data file, its live bytes, its size, its lock and its neighbours."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class FileInfo:
    """One data file. ``valid`` counts the bytes of records with a ref count above 0.

    ``locked`` is set while the GC combines or deletes the file; ``readers`` counts client reads
    in progress; ``left``/``right`` are the neighbouring file numbers (None at either end).
    """

    number: int
    valid: int = 0
    size: int = 0
    locked: bool = False
    left: int | None = None
    right: int | None = None
    readers: int = 0
    pending_delete: bool = False


class FileSummary:
    """All data files in order, with running totals for the GC trigger."""

    def __init__(self) -> None:
        self.files: dict[int, FileInfo] = {}
        self.sum_valid = 0
        self.sum_size = 0

    def add(self, number: int, valid: int = 0, size: int = 0) -> FileInfo:
        """Append a file on the right of the newest one."""
        last = self.newest()
        info = FileInfo(number, valid, size, left=last.number if last else None)
        if last is not None:
            if number <= last.number:
                raise ValueError(f"file {number} is not newer than file {last.number}")
            last.right = number
        self.files[number] = info
        self.sum_valid += valid
        self.sum_size += size
        return info

    def remove(self, number: int) -> None:
        """Drop a file's row and join its neighbours."""
        info = self.files.pop(number)
        if info.left is not None:
            self.files[info.left].right = info.right
        if info.right is not None:
            self.files[info.right].left = info.left
        self.sum_valid -= info.valid
        self.sum_size -= info.size

    def newest(self) -> FileInfo | None:
        if not self.files:
            return None
        return self.files[max(self.files)]

    def oldest(self) -> FileInfo | None:
        if not self.files:
            return None
        return self.files[min(self.files)]

    def in_order(self) -> list[FileInfo]:
        return [self.files[n] for n in sorted(self.files)]

    def garbage_ratio(self) -> float:
        return (self.sum_size - self.sum_valid) / self.sum_size if self.sum_size else 0.0

    def utilisation(self) -> float:
        return self.sum_valid / self.sum_size if self.sum_size else 1.0
