"""Names a client may use: topics (the store's rule) and consumer groups."""

from __future__ import annotations

import re

from strata.broker.errors import InvalidGroupError
from strata.format.record import encode_topic

MAX_GROUP_CHARS = 255
_GROUP = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")


def check_topic(topic: str) -> str:
    """``topic`` if it is a valid topic name, else InvalidTopicError naming the problem."""
    encode_topic(topic)
    return topic


def check_group(group: str) -> str:
    """``group`` if it is a valid consumer group name, else InvalidGroupError."""
    if not isinstance(group, str) or not _GROUP.fullmatch(group):
        shown = repr(group if not isinstance(group, str) or len(group) <= 40
                     else group[:37] + "...")
        n = len(group) if isinstance(group, str) else 0
        raise InvalidGroupError(
            f"invalid consumer group name {shown} (length {n}): a group is 1-{MAX_GROUP_CHARS} "
            "characters from [%|a-zA-Z0-9_-]")
    return group
