"""Open-time state: wiping a transient store, loading the clean-shutdown snapshot, or rebuilding."""

from __future__ import annotations

import logging
import os

from strata.files.io import fsync_dir

from . import layout, recovery, snapshot
from .errors import CorruptSnapshotError, RecoveryNeedsRefsError
from .index import MessageIndex
from .model import Kind
from .summary import FileSummary

log = logging.getLogger("strata.refstore.store")   # the name this message has always used


def recover_at_open(directory: str, kind: Kind, wanted_refs,
                    recover_refs) -> recovery.Recovered:
    """The index and summary a store opens with (lock held on the directory, before any thread)."""
    d = directory
    if kind is Kind.TRANSIENT:
        for name in layout.owned_names(d):
            os.unlink(os.path.join(d, name))
        fsync_dir(d)
        return recovery.Recovered(MessageIndex(), FileSummary(), True, reason="transient")
    reason = ""
    if snapshot.exists(d):
        try:
            snap = snapshot.load(d)
            if layout.list_temp_files(d):
                raise CorruptSnapshotError("GC temporary files are present")
            if wanted_refs is not None and sorted(set(wanted_refs)) != sorted(
                    set(snap.client_refs)):
                reason = "the client refs supplied differ from the ones saved at shutdown"
            else:
                rec_ = recovery.load_clean(d, snap)
                snapshot.discard(d)
                return rec_
        except CorruptSnapshotError as exc:
            reason = f"clean-shutdown state unusable: {exc}"
        snapshot.discard(d)
    else:
        reason = "no clean-shutdown marker"
    has_data = bool(layout.list_data_files(d) or layout.list_temp_files(d))
    if not has_data:
        return recovery.Recovered(MessageIndex(), FileSummary(), True, reason="new store")
    if recover_refs is None:
        raise RecoveryNeedsRefsError(
            f"ref store {d!r} needs recovery ({reason}); pass recover_refs= an iterable of "
            f"(msg_id, delta) reference counts, or recover_refs=strata.refstore.KEEP_ALL "
            f"to keep every message found")
    log.info("ref store %s: rebuilding the index from the data files (%s)", d, reason)
    return recovery.rebuild(d, recover_refs, reason)
