"""SASL on the Kafka listener (SaslHandshake, SaslAuthenticate) and the ACL decisions for
Kafka requests.

With ``--acl`` a connection must authenticate before anything but ApiVersions and the SASL
requests: SaslHandshake picks PLAIN or SCRAM-SHA-256 (``strata.broker.kafka.sasl_mechanisms``),
SaslAuthenticate carries the mechanism's messages; the account (accessKey = user name,
secretKey = password) becomes the connection's principal. A failed authentication is
answered with SASL_AUTHENTICATION_FAILED and the connection closed (as Kafka does); another
request before authentication closes the connection without an answer (``gate``).

Rights follow the ACL file's topicPerms/groupPerms: Produce needs PUB on the topic; Fetch,
ListOffsets, OffsetCommit and OffsetFetch SUB on the topic; the group APIs SUB on the group
(FindCoordinator, DescribeGroups and ListGroups: PUB or SUB). A refused topic or group gets
TOPIC_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED, never data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse,
                                 SaslHandshakeRequest, SaslHandshakeResponse)

from strata.broker.acl import AccessList, Account, Kind, Perm, granted
from strata.broker.kafka.api import RequestContext, handles
from strata.broker.kafka.errors import (ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED,
                                       UNSUPPORTED_SASL_MECHANISM)
from strata.broker.kafka.sasl_mechanisms import (MECHANISMS, AuthFailed, PlainAuth, ScramAuth,
                                                 ScramCredentials, start)

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
OPEN_BEFORE_AUTH = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))


@dataclass
class SaslState:
    """A connection's progress: the mechanism its handshake chose, and who it is once
    authenticated."""

    mechanism: str | None = None
    exchange: PlainAuth | ScramAuth | None = None
    principal: str | None = None


def _state(ctx: RequestContext) -> SaslState:
    st = ctx.connection.state.get("sasl")
    if st is None:
        st = ctx.connection.state["sasl"] = SaslState()
    return st


def acl_of(ctx: RequestContext) -> AccessList | None:
    """The listener's ACL (None without ``--acl``)."""
    return getattr(ctx.broker, "acl", None)


def account(ctx: RequestContext) -> Account | None:
    """The connection's authenticated account."""
    acl = acl_of(ctx)
    return acl.accounts.get(principal(ctx) or "") if acl is not None else None


def _credentials(ctx: RequestContext, acl: AccessList) -> ScramCredentials:
    creds = ctx.broker.state.get("scram")
    if creds is None:
        creds = ctx.broker.state["scram"] = ScramCredentials(acl)
    return creds


def principal(ctx: RequestContext) -> str | None:
    """The account a connection authenticated as (None: not authenticated, or no ACL)."""
    return ctx.connection.principal


def gate(ctx: RequestContext) -> bool:
    """May this request run? False: close the connection (with ``--acl``, everything but
    ApiVersions and SASL before the connection authenticated)."""
    if acl_of(ctx) is None or ctx.api_key in OPEN_BEFORE_AUTH:
        return True
    return principal(ctx) is not None


def allowed(ctx: RequestContext, kind: Kind, name: str, perm: Perm) -> bool:
    """Has the connection's account ``perm`` on the topic or group ``name``? (Always,
    without ``--acl``.)"""
    if acl_of(ctx) is None:
        return True
    a = account(ctx)
    return a is not None and granted(a.owns(kind, name), perm)


# v1 only: after a v0 handshake the SASL messages would come as bare frames, not as
# SaslAuthenticate requests (every client here sends v1 to a broker that offers it)
@handles(SASL_HANDSHAKE, 1, 1)
async def sasl_handshake(ctx: RequestContext, req: SaslHandshakeRequest):
    v = ctx.api_version
    acl = acl_of(ctx)
    st = _state(ctx)
    enabled = list(MECHANISMS) if acl is not None else []
    if acl is None:
        err = UNSUPPORTED_SASL_MECHANISM        # no --acl: nothing to authenticate against
    elif st.mechanism is not None:
        err = ILLEGAL_SASL_STATE
    elif req.mechanism not in MECHANISMS:
        err = UNSUPPORTED_SASL_MECHANISM
    else:
        err = 0
        st.mechanism = req.mechanism
        st.exchange = start(req.mechanism, acl, _credentials(ctx, acl))
    return SaslHandshakeResponse(version=v, error_code=err, mechanisms=enabled)


@handles(SASL_AUTHENTICATE, 0, 2, flexible_from=2)
async def sasl_authenticate(ctx: RequestContext, req: SaslAuthenticateRequest):
    v = ctx.api_version
    st = _state(ctx)
    if st.exchange is None or st.principal is not None:
        what = "authenticated already" if st.principal else "no SaslHandshake before"
        _close_after(ctx)
        return SaslAuthenticateResponse(version=v, error_code=ILLEGAL_SASL_STATE,
                                        error_message=f"SaslAuthenticate: {what}",
                                        auth_bytes=b"", session_lifetime_ms=0)
    try:
        out = st.exchange.step(bytes(req.auth_bytes))
    except AuthFailed as exc:
        log.warning("kafka client %s (%s): SASL %s refused: %s", ctx.peer, ctx.client_id,
                    st.mechanism, exc)
        _close_after(ctx)
        return SaslAuthenticateResponse(version=v, error_code=SASL_AUTHENTICATION_FAILED,
                                        error_message=str(exc), auth_bytes=b"",
                                        session_lifetime_ms=0)
    if st.exchange.done:
        st.principal = ctx.connection.principal = st.exchange.account.access_key
        log.info("kafka client %s (%s) authenticated as %r with %s", ctx.peer, ctx.client_id,
                 st.principal, st.mechanism)
    return SaslAuthenticateResponse(version=v, error_code=0, error_message=None,
                                    auth_bytes=out, session_lifetime_ms=0)


def _close_after(ctx: RequestContext) -> None:
    """Close the connection once this response is sent (the listener checks ``closing``
    after each response)."""
    ctx.connection.closing = True
