"""The broker's errors: subclasses of strata.errors, each naming what was wrong."""

from __future__ import annotations

from strata.errors import CorruptStoreError, InvalidConfigError, InvalidInputError


class InvalidGroupError(InvalidInputError):
    """A consumer group name does not match ``^[%|a-zA-Z0-9_-]{1,255}$``."""


class InvalidReceiptHandleError(InvalidInputError):
    """A receipt handle is forged, damaged, expired, replaced or already used."""


class CorruptJournalError(CorruptStoreError):
    """The consumer-group journal fails its checks before its tail (its header, or a record
    that later records follow)."""


class InvalidMessageError(InvalidInputError):
    """A message a client sent is refused; ``code`` is the protocol's status code for it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class InvalidAclError(InvalidConfigError):
    """An ACL file (``strata serve --acl``) cannot be used: the message names the file, the
    account and the entry."""
