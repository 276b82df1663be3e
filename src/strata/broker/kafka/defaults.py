"""The Kafka listener's option defaults and bounds, in one place that costs nothing to
import: the ``strata serve`` CLI (which must not import the listener to print ``--help``),
``ServeConfig`` and the modules that use them (``groups``, ``read_lanes``) all read them
here, so a default is written once.

Nothing but constants and a check lives here (no imports beyond ``strata.errors``).
"""

from __future__ import annotations

from strata.errors import InvalidConfigError

# --kafka-initial-rebalance-delay-ms: Kafka's group.initial.rebalance.delay.ms (groups.py)
INITIAL_REBALANCE_DELAY_MS = 3_000
MAX_INITIAL_REBALANCE_DELAY_MS = 1_800_000    # Kafka's group.max.session.timeout.ms

# --kafka-read-threads: connections whose Fetch reads can wait at once (on a cold or tiered
# segment) before other connections' reads wait too (read_lanes.py)
READ_THREADS = 4
# each thread is started only when every running one is busy, but a pool far above the
# connections a broker serves at once is a mistyped value, not a tuning
MAX_READ_THREADS = 256


def check_range(option: str, value: int, low: int, high: int) -> int:
    """``value`` if ``low <= value <= high``; else ``InvalidConfigError`` naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidConfigError(f"{option} {value!r}: expected an integer "
                                 f"from {low} to {high}")
    return value
