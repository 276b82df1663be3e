"""strata.refstore: a reference-counted message store keyed by 16-byte message ids.

Messages written N times (by one or many clients) are stored once and deleted after N removes;
files whose live bytes fall low are combined by a background GC that never risks a message.
After RabbitMQ's ``rabbit_msg_store``; see docs/refstore.md and docs/format.md (section 11).

    store = strata.refstore.open("./refs")             # kind="persistent" by default
    c = store.client(on_disk=lambda ids: ...)
    c.write(msg_id, body); c.read(msg_id); c.remove([msg_id]); c.terminate()
    store.close()
"""

from .client import StoreClient
from .errors import (ClientTerminatedError, CorruptSnapshotError, InjectedFault,
                     RecoveryNeedsRefsError, UnknownClientError)
from .gc import COMBINE_STEPS, DELETE_STEPS
from .recovery import KEEP_ALL
from .store import FileStat, Kind, RefStore, StoreStats, open

__all__ = [
    "open", "RefStore", "StoreClient", "Kind", "StoreStats", "FileStat", "KEEP_ALL",
    "COMBINE_STEPS", "DELETE_STEPS", "RecoveryNeedsRefsError", "ClientTerminatedError",
    "UnknownClientError", "CorruptSnapshotError", "InjectedFault",
]
