"""Errors of the tier: all in strata's one hierarchy."""

from __future__ import annotations

from strata.errors import CorruptStoreError, StrataError


class TierError(StrataError):
    """Something about the tier went wrong; the message says what and where."""


class TierUnavailableError(TierError):
    """The tier's backend failed or did not answer (after its retries)."""


class TierConflictError(TierError):
    """A conditional write found the object changed (another writer on the same tier?)."""


class CorruptTierError(CorruptStoreError, TierError):
    """Bytes read from the tier fail their checks (CRC, lengths); never served."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path
