"""The field table and verdicts of the compiled record reader (``record_kernels``), which the
readers use without importing numba until they first read: what each row of the int64 table
holds, what a check found at a record, why a walk stopped. Pure constants, no I/O.
"""

from __future__ import annotations

from types import ModuleType

# Rows of the field table (int64, one column per record).
(F_TOTAL, F_QUEUE_ID, F_FLAG, F_QUEUE_OFFSET, F_PHYS, F_SYS_FLAG, F_BORN_TS, F_STORE_TS,
 F_TX_OFFSET, F_RECONSUME, F_HOSTS_AT, F_TOPIC_AT, F_PROPS_AT, F_BODY_AT, F_BODY_END) = range(15)
FIELDS = 15

# Rows of the views table (``view_kernels.views_at``: int64, one column per record): the
# columns ``get_columns`` hands out as they are, and where each properties section lies.
(V_QUEUE_OFFSET, V_PHYS, V_STORE_TS, V_BORN_TS, V_PROPS_AT, V_BODY_AT) = range(6)
VIEW_FIELDS = 6

# What a check found at a record position.
GOOD = 0            # a whole, intact message record of the offset asked for
OTHER = 1           # intact, but another message than the one asked for (topic/queue/offset)
NO_RECORD = 2       # not an intact message record there (blank, zeros, torn, bad lengths...)
CRC_MISMATCH = 3    # structurally whole, its CRC32C does not match

# walk(): why it stopped
WALK_END = 0        # reached the end (or filled the table)
WALK_BLANK = 1      # a blank record's magic at the stop position (checked by the caller)
WALK_BAD = 2        # bytes at the stop position are no good record of that offset


_loaded: dict[str, ModuleType] = {}   # (an import statement costs ~1 µs a call: once)


def kernels() -> ModuleType:
    """``strata.format.record_kernels``, imported on first use (numba and the compiled code's
    cache load then: see README, "Start-up cost of the compiled reader")."""
    m = _loaded.get("kernels")
    if m is None:
        from strata.format import record_kernels
        m = _loaded["kernels"] = record_kernels
    return m


def objects() -> ModuleType:
    """``strata.format.record_objects`` (the compiled making of ``StoredMessage``s), imported
    on first use as ``kernels()`` is, with ``BatchMessage``'s compiled dealloc installed
    (``strata.format.message_dealloc``)."""
    m = _loaded.get("objects")
    if m is None:
        from strata.format import message_dealloc, record_objects  # noqa: F401 (its dealloc)
        m = _loaded["objects"] = record_objects
    return m
