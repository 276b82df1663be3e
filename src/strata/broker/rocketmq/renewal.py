"""Push consumers' deliveries (a receive with ``auto_renew``): their invisible times are
renewed while the client is connected and released soon after it is gone.

What keeps such a delivery from a second consumer is the rule of
``strata.broker.group_state`` (``Delivery.due_ms``): it is not due while its client is
connected (``connected_until``, from the sessions here) and within its renew-until time. The
renew loop writes the renewals to the journal, so that the promise survives a restart and
the client's invisible time it was told holds; when the loop runs late (a loaded machine),
nothing is handed out twice meanwhile.

A part of ``MessagingService`` (``strata.broker.rocketmq.service``), which mixes it in: it
uses the service's ``groups``, ``sessions``, ``worker`` and ``options``.
"""

from __future__ import annotations

import asyncio
import logging

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
                await self.worker.call(self.renew_due, now_ms())
            except Exception:       # noqa: BLE001 - keep renewing; say what went wrong
                log.exception("renewing invisible times failed")

    def connected_until(self, client: str) -> int:
        """Until when (ms) ``client`` counts as connected without another call; -1: gone.
        (``ConsumerGroups.connected_until``: called on the group worker's thread.)"""
        return self.sessions.connected_until(client, SESSION_TIMEOUT_MS, STREAM_TIMEOUT_MS)

    def renew_due(self, now: int) -> None:
        """Renew the push consumers' deliveries that are close to their deadline, for the
        clients still connected; release those of clients that are not. (On the group
        worker's thread.)"""
        slice_ms = self.options.renew_slice_ms
        ahead = min(RENEW_AHEAD_MS, slice_ms // 3)
        # the index's clients as they stand: renew and release walk each client's deliveries
        # once and drop what is stale (renewing_clients would walk them all a first time)
        for client in list(self.groups.renewing):
            if self.sessions.connected(client, now, SESSION_TIMEOUT_MS, STREAM_TIMEOUT_MS):
                self.renewed += self.groups.renew(client, now, ahead, slice_ms)[0]
            else:
                self._release(client, now)

    def _release(self, client: str, now: int) -> None:
        n = self.groups.release(client, now + RELEASE_MS)
        if n:
            self.released += n
            log.info("client %s is gone: its %d messages in flight come back in %d ms",
                     client, n, RELEASE_MS)

    def _client_gone(self, client: str) -> None:
        """The client ended its session (NotifyClientTermination, or its Telemetry stream
        closed): what is renewed for it comes back soon (released on the group worker;
        nobody waits for it: a stream's cleanup cannot)."""
        self.sessions.forget(client)
        if client:
            self.worker.submit(self._release, client, now_ms())
