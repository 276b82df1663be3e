"""The interface every tier backend implements: objects that know a path and their bytes.

A backend knows nothing of topics or queues (RIP-65's lesson): it stores whole objects under
relative paths ("a/b/c"), reads byte ranges, tells sizes, deletes and lists. Objects are
written whole and atomically (a reader sees the old object, the new one or none, never part of
one). ``put_if`` is the conditional write for metadata that must not be overwritten blindly.
Failures raise TierUnavailableError (after the backend's own retries); a conditional write
that finds another version raises TierConflictError.
"""

from __future__ import annotations

import abc


class TierBackend(abc.ABC):
    """A flat namespace of immutable objects addressed by relative path."""

    url: str  # where the objects live, for messages

    @abc.abstractmethod
    def put(self, path: str, data: bytes | memoryview) -> None:
        """Store ``data`` as object ``path`` (replacing it), atomically and durably."""

    def put_many(self, items: list[tuple[str, bytes | memoryview]]) -> None:
        """``put`` of each (path, data): every object whole and durable when this returns
        (a failure may leave some of them written, none part-written). A backend may share
        the cost of making them durable (the POSIX one: one journal commit for all)."""
        for path, data in items:
            self.put(path, data)

    @abc.abstractmethod
    def put_if(self, path: str, data: bytes, expect: str | None) -> str:
        """Store ``data`` only if ``path``'s current version is ``expect`` (None: only if no
        object exists); returns the new version. TierConflictError otherwise."""

    @abc.abstractmethod
    def version(self, path: str) -> str | None:
        """An opaque version tag of ``path`` (changes with every write), None if absent."""

    @abc.abstractmethod
    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes of ``path`` from ``start`` (to the end if None); FileNotFoundError
        if there is no such object. Fewer bytes only at the object's end."""

    @abc.abstractmethod
    def size(self, path: str) -> int | None:
        """Size in bytes of ``path``, None if there is no such object."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Remove ``path``; no error if it does not exist."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Paths of every object whose path starts with ``prefix``, sorted."""

    def clean_partial(self) -> int:
        """Remove leftovers of writes a crash interrupted (temporary files, unfinished
        multipart uploads); returns how many. They never count as objects."""
        return 0

    def close(self) -> None:
        """Release connections."""
