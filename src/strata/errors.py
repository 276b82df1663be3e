"""One exception hierarchy for everything strata raises on purpose."""

from __future__ import annotations


class StrataError(Exception):
    """Base of every error strata raises deliberately."""


class InvalidInputError(StrataError, ValueError):
    """A caller passed something strata refuses: the message names what was wrong."""


class InvalidTopicError(InvalidInputError):
    """A topic name does not match ``^[%|a-zA-Z0-9_-]{1,127}$``."""


class TopicExistsError(InvalidInputError):
    """``create_topic`` named an existing topic with a queue count other than its own."""


class MessageTooLargeError(InvalidInputError):
    """A body or its properties exceed the configured limits."""


class PropertiesTooLargeError(MessageTooLargeError):
    """A message's properties (one of them, or all together) exceed their limit."""


class InvalidConfigError(InvalidInputError):
    """A configuration value is out of range or of the wrong kind."""


class StoreLockedError(StrataError):
    """Another process holds the store directory open for writing."""


class StoreNotFoundError(StrataError, FileNotFoundError):
    """The directory given is not a strata store (and we were asked not to create one)."""


class StoreClosedError(StrataError):
    """An operation was attempted on a closed store."""


class ReadOnlyStoreError(StrataError):
    """A write was attempted on a store opened with ``readonly=True``."""


class CorruptStoreError(StrataError):
    """Stored bytes fail their checks in a way recovery cannot repair; the message says where."""


class CorruptRecordError(CorruptStoreError):
    """One record failed its checks (magic, lengths, CRC)."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class DiskFullError(StrataError, OSError):
    """The disk is too full to accept writes; stored data is untouched."""


class IndexRebuildingError(StrataError):
    """The key index is being rebuilt from the commit log in the background; ``query`` cannot
    answer completely until it is done (``MessageStore.wait_index_rebuilt``)."""
