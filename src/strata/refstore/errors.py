"""Errors particular to the ref-counted message store (all from the strata hierarchy)."""

from __future__ import annotations

from strata.errors import CorruptStoreError, InvalidInputError, StrataError


class RecoveryNeedsRefsError(StrataError):
    """The store was not shut down cleanly and no reference counts were supplied."""


class UnknownClientError(InvalidInputError):
    """An operation named a client that is not registered (or has terminated)."""


class ClientTerminatedError(InvalidInputError):
    """A client was used after ``terminate()`` or ``delete_and_terminate()``."""


class CorruptSnapshotError(CorruptStoreError):
    """A clean-shutdown file (index, summary or clean marker) fails its checks."""


class InjectedFault(StrataError):
    """Raised by a test fault hook to simulate a crash at a chosen step."""
