"""The ref store's value types and settings: kind, stats snapshots, reply slot, config checks."""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Callable

from strata.errors import InvalidConfigError

DEFAULT_FILE_SIZE_LIMIT = 16 * 1024 * 1024
DEFAULT_SYNC_INTERVAL = 0.2
DEFAULT_GC_GARBAGE_RATIO = 0.5
DEFAULT_WRITE_BUFFER_SIZE = 1024 * 1024
DEFAULT_MAX_IN_FLIGHT_BYTES = 64 * 1024 * 1024
MIN_FILE_SIZE_LIMIT = 64

FaultHook = Callable[[str, dict], None]


class Kind(str, enum.Enum):
    PERSISTENT = "persistent"
    TRANSIENT = "transient"


@dataclass(frozen=True)
class FileStat:
    number: int
    valid: int
    size: int
    locked: bool


@dataclass(frozen=True)
class StoreStats:
    """A consistent snapshot of the store's counters."""

    files: tuple[FileStat, ...]
    current_file: int
    valid_bytes: int
    total_bytes: int
    entries: int
    flying: int
    cached: int
    in_flight_bytes: int
    gc_combines: int
    gc_deletes: int
    gc_bytes_moved: int
    writes_eliminated: int
    writes_ignored: int
    removes_ignored: int

    @property
    def garbage_ratio(self) -> float:
        return 1.0 - self.valid_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def utilisation(self) -> float:
        return self.valid_bytes / self.total_bytes if self.total_bytes else 1.0


class _Reply:
    __slots__ = ("event", "value", "error")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.value = None
        self.error: BaseException | None = None

    def set(self, value=None) -> None:
        self.value = value
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()

    def wait(self):
        self.event.wait()
        if self.error is not None:
            raise self.error
        return self.value



def _check_config(file_size_limit, sync_interval, gc_garbage_ratio, write_buffer_size,
                  max_in_flight_bytes) -> None:
    if not isinstance(file_size_limit, int) or file_size_limit < MIN_FILE_SIZE_LIMIT or \
            file_size_limit > 0xFFFF_FFFF:
        raise InvalidConfigError(
            f"file_size_limit must be an int in {MIN_FILE_SIZE_LIMIT}..4294967295, "
            f"got {file_size_limit!r}")
    if not isinstance(sync_interval, (int, float)) or not 0 < sync_interval <= 60:
        raise InvalidConfigError(f"sync_interval must be seconds in (0, 60], got "
                                 f"{sync_interval!r}")
    if not isinstance(gc_garbage_ratio, (int, float)) or not 0 < gc_garbage_ratio < 1:
        raise InvalidConfigError(
            f"gc_garbage_ratio must be a number strictly between 0 and 1, got "
            f"{gc_garbage_ratio!r}")
    if not isinstance(write_buffer_size, int) or write_buffer_size < 0:
        raise InvalidConfigError(f"write_buffer_size must be an int >= 0, got "
                                 f"{write_buffer_size!r}")
    if not isinstance(max_in_flight_bytes, int) or max_in_flight_bytes < 1:
        raise InvalidConfigError(f"max_in_flight_bytes must be an int >= 1, got "
                                 f"{max_in_flight_bytes!r}")
