"""Fixtures and helpers for the ref-store tests."""

from __future__ import annotations

import threading

import pytest

import strata.refstore as rs


def mid(i: int) -> bytes:
    """A 16-byte message id for integer ``i``."""
    return i.to_bytes(16, "big")


def body(i: int, size: int = 100) -> bytes:
    pattern = b"%d:" % i
    return (pattern * (size // len(pattern) + 1))[:size]


class Confirms:
    """Collects on_disk callbacks (called from the store's sync thread)."""

    def __init__(self) -> None:
        self.ids: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, ids) -> None:
        with self.lock:
            self.ids.extend(ids)

    def set(self) -> set:
        with self.lock:
            return set(self.ids)


@pytest.fixture
def open_store(tmp_path):
    """open_store(**options) -> RefStore in tmp_path/'rs', closed at teardown."""
    opened: list[rs.RefStore] = []

    def _open(path=None, kind="persistent", **options):
        options.setdefault("sync_interval", 0.01)
        s = rs.open(path or (tmp_path / "rs"), kind, **options)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        if not s.closed:
            s.crash() if s.failure is not None else s.close()
