"""The RocketMQ service's limits and defaults (invisible times, batch sizes, long polling,
renewal of push consumers' deliveries, consumer back-off) and its ``BrokerOptions``."""

from __future__ import annotations

from dataclasses import dataclass

from strata.broker.send import GATHER_S

MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_BATCH = 32
# a push consumer's receive (auto_renew): invisible this long, renewed by as much while its
# client is connected (RocketMQ's proxy: renewSliceTimeMillis), for at most RENEW_MAX_MS
# (renewMaxTimeMillis); a renewal is made when the invisible time has this much left
RENEW_SLICE_MS = 60_000
RENEW_MAX_MS = 3 * 3600 * 1000
RENEW_AHEAD_MS = 10_000            # or a third of the slice, if less
RENEW_PERIOD_MS = 5_000            # how often renewals are looked for (or a sixth of the slice)
RELEASE_MS = 1_000                 # a gone client's renewed messages come back this soon
SESSION_TIMEOUT_MS = 30_000        # a client without a Telemetry stream: gone after this
                                   # long without a call (the clients heartbeat every 10 s)
STREAM_TIMEOUT_MS = 120_000        # ... with one open (a hung process): RocketMQ's channel
                                   # expiry
MAX_DELIVERY_ATTEMPTS = 16
# invisible time after a consumer's n-th failed attempt (RocketMQ's retry levels from 1 s)
CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200,
                      1800, 3600, 7200)
DEFAULT_POLL_MS = 20_000
POLL_MARGIN_S = 1.0     # answer a long poll this long before the client's deadline
# A receive past its long-polling time still waits (up to the client's deadline, or this long
# without one) for dispatch to cover what was acknowledged before it began.
CATCH_UP_S = 30.0
# Waits are woken by events (dispatch, acks, invisible times ending); this bounds one wait so
# that a change no event announces (an operator's offset reset) is seen soon all the same.
RECHECK_S = 0.5


@dataclass
class BrokerOptions:
    auto_create: bool = True
    broker_name: str = "strata"
    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS
    transaction_check_interval_ms: int = 60_000
    transaction_max_checks: int = 15
    gather_s: float = GATHER_S      # puts start at most once per this interval (send.py)
    renew_slice_ms: int = RENEW_SLICE_MS    # auto_renew: invisible time per renewal
    renew_max_ms: int = RENEW_MAX_MS        # auto_renew: renewed for at most this long
