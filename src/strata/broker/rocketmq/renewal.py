"""Push consumers' deliveries (a receive with ``auto_renew``): their invisible times are
renewed while the client is connected and released soon after it is gone.

A part of ``MessagingService`` (``strata.broker.rocketmq.service``), which mixes it in: it
uses the service's ``groups``, ``sessions`` and ``options``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from strata.broker.rocketmq.options import (RELEASE_MS, RENEW_AHEAD_MS, RENEW_PERIOD_MS,
                                            SESSION_TIMEOUT_MS, STREAM_TIMEOUT_MS)
from strata.broker.rocketmq.rpc import now_ms

log = logging.getLogger(__name__)


class Renewal:
    """Renewing and releasing the deliveries of push consumers (mixed into the service)."""

    # ------------------------------------------------------------------ renewal (auto_renew)

    def _renew_period_s(self) -> float:
        return max(0.05, min(RENEW_PERIOD_MS, self.options.renew_slice_ms / 6) / 1000)

    async def _renew_loop(self) -> None:
        period = self._renew_period_s()
        while True:
            await asyncio.sleep(period)
            try:
                self.renew_due(now_ms())
            except Exception:       # noqa: BLE001 - keep renewing; say what went wrong
                log.exception("renewing invisible times failed")

    def renew_due(self, now: int) -> None:
        """Renew the push consumers' deliveries that are close to their deadline, for the
        clients still connected; release those of clients that are not."""
        self._renewed_at = time.monotonic()
        slice_ms = self.options.renew_slice_ms
        ahead = min(RENEW_AHEAD_MS, slice_ms // 3)
        # the index's clients as they stand: renew and release walk each client's deliveries
        # once and drop what is stale (renewing_clients would walk them all a first time)
        for client in list(self.groups.renewing):
            if self.sessions.connected(client, now, SESSION_TIMEOUT_MS, STREAM_TIMEOUT_MS):
                self.renewed += self.groups.renew(client, now, ahead, slice_ms)[0]
            else:
                self._release(client, now)

    def renew_if_late(self) -> None:
        """Before a pop: renew now if the renew loop is late (a loaded machine can hold the
        event loop or the process back past a renewal's margin). Renewing every ``late`` s
        renews each delivery whose invisible time ends within ``ahead`` > ``late`` of now, so
        a pop never finds due, and hands to another consumer, a delivery that a connected
        push consumer still holds."""
        ahead_s = min(RENEW_AHEAD_MS, self.options.renew_slice_ms // 3) / 1000
        late = min(self._renew_period_s(), ahead_s / 2)
        if time.monotonic() - self._renewed_at > late:
            try:
                self.renew_due(now_ms())
            except Exception:       # noqa: BLE001 - the receive goes on; the loop retries
                log.exception("renewing invisible times failed")

    def _release(self, client: str, now: int) -> None:
        n = self.groups.release(client, now + RELEASE_MS)
        if n:
            self.released += n
            log.info("client %s is gone: its %d messages in flight come back in %d ms",
                     client, n, RELEASE_MS)

    def _client_gone(self, client: str) -> None:
        """The client ended its session (NotifyClientTermination, or its Telemetry stream
        closed): what is renewed for it comes back soon."""
        self.sessions.forget(client)
        if client:
            self._release(client, now_ms())
