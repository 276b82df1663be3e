"""Errors of the tier: all in strata's one hierarchy."""

from __future__ import annotations

from strata.errors import CorruptStoreError, StrataError


class TierError(StrataError):
    """Something about the tier went wrong; the message says what and where."""


class TierUnavailableError(TierError):
    """The tier's backend failed or did not answer (after its retries)."""


class TierRefusedError(TierUnavailableError):
    """The tier answered, or could not be asked, in a way waiting cannot change: no
    credentials, no such bucket, access denied. An explicit sync fails at once with it; the
    background uploader keeps retrying (an operator may fix it while the store runs)."""


class TierConflictError(TierError):
    """A conditional write found the object changed (another writer on the same tier?)."""


class CorruptTierError(CorruptStoreError, TierError):
    """Bytes read from the tier fail their checks (CRC, lengths); never served."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path
