"""strata: a durable message store and broker.

    import strata
    with strata.open("./data") as store:
        store.put(strata.Message("orders", b"hello", keys=["o-1"], tags="new"))
"""

from __future__ import annotations

import os

from strata import errors
from strata.format.record import StoredMessage
from strata.store.config import StoreConfig
from strata.store.message import (ColumnBatch, GetResult, GetStatus, Message, PutResult,
                                  PutResults, PutStatus)
from strata.store.message_store import MessageStore
from strata.store.topics import TopicType
from strata import tiered as _tiered  # noqa: F401  (attaches tiered storage to MessageStore)

__version__ = "0.1.0"
__all__ = ["open", "StoreConfig", "Message", "PutResult", "PutResults", "PutStatus", "GetResult",
           "GetStatus", "StoredMessage", "MessageStore", "TopicType", "ColumnBatch", "errors"]


def open(path: str | os.PathLike, config: StoreConfig | None = None, *,  # noqa: A001
         readonly: bool = False) -> MessageStore:
    """Open (or create) the store in directory ``path``; use it as a context manager."""
    return MessageStore(path, config, readonly=readonly)
