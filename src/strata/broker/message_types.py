"""Which message types a topic accepts: what its route lists in ``accept_message_types`` (the
official producer refuses to send a type its route does not list)."""

from __future__ import annotations

from strata.broker.protocol import MessageType

ALL_TYPES = (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION)
_DECLARED = {"normal": (MessageType.NORMAL,), "fifo": (MessageType.FIFO,),
             "delay": (MessageType.DELAY,), "transaction": (MessageType.TRANSACTION,)}


def accepted_types(declared: str | None = None) -> tuple[int, ...]:
    """The types a topic declared ``normal|fifo|delay|transaction`` accepts; a topic that
    declared none (every topic until ``strata topics create --type`` exists, and any topic a
    send auto-creates) is mixed and accepts all four, as RocketMQ's MIXED topics do."""
    if declared is None:
        return ALL_TYPES
    try:
        return _DECLARED[declared]
    except KeyError:
        raise ValueError(f"unknown topic message type {declared!r} (expected one of "
                         f"{', '.join(_DECLARED)})") from None
