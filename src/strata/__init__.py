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
from strata.files.io import FileOps
from strata import tiered

__version__ = "0.1.0"
__all__ = ["open", "StoreConfig", "Message", "PutResult", "PutResults", "PutStatus", "GetResult",
           "GetStatus", "StoredMessage", "MessageStore", "TopicType", "ColumnBatch", "errors"]


def open(path: str | os.PathLike, config: StoreConfig | None = None, *,  # noqa: A001
         readonly: bool = False, create: bool = True, file_ops: FileOps | None = None,
         local_only: bool = False) -> MessageStore:
    """Open (or create) the store in directory ``path``; use it as a context manager.

    The opener of a store: it hands the store its tiered storage (``strata.tiered``), so a
    store with a ``tier_url`` uploads to its tier and reads its history back. ``create``:
    a writer may make a new store; ``file_ops``: the file layer (tests inject faults);
    ``local_only``: reads answer from the local files alone (see ``MessageStore``)."""
    return MessageStore(path, config, readonly=readonly, create=create, file_ops=file_ops,
                        local_only=local_only, tier=tiered.SUPPORT)
