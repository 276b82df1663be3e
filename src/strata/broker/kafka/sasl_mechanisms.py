"""SASL mechanisms of the Kafka listener, server side, against the ``--acl`` accounts (an
account's accessKey is the SASL user name, its secretKey the password): PLAIN (RFC 4616) and
SCRAM-SHA-256 (RFC 5802, RFC 7677). Pure code: bytes in, bytes out; the Kafka requests that
carry them are ``strata.broker.kafka.sasl``.

SCRAM needs a salted password per user; the ACL file holds the secret key itself, so the
listener derives one with a salt made at start (random, per account) and keeps it for the
life of the process. An unknown user gets a made-up salt that is stable for that name, so a
client cannot tell unknown users from wrong passwords before it sends a proof.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from strata.broker.acl import AccessList, Account

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
MECHANISMS = (PLAIN, SCRAM_SHA_256)
SCRAM_ITERATIONS = 4096        # RFC 7677's minimum; Kafka's default too
MAX_TOKEN = 4096               # a client's SASL message longer than this is refused


class AuthFailed(Exception):
    """Authentication failed; the message says why (it goes to the client and the log, and
    never says which of user name and password was wrong)."""


class PlainAuth:
    """RFC 4616: one message ``[authzid] NUL authcid NUL passwd``."""

    mechanism = PLAIN

    def __init__(self, acl: AccessList) -> None:
        self.acl = acl
        self.account: Account | None = None

    @property
    def done(self) -> bool:
        return self.account is not None

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthFailed("PLAIN takes one message; the exchange is already complete")
        if len(token) > MAX_TOKEN:
            raise AuthFailed(f"PLAIN message of {len(token)} bytes is too long")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthFailed("PLAIN message is not authzid NUL user NUL password")
        authzid, user, password = parts
        try:
            name, authz = user.decode(), authzid.decode()
        except UnicodeDecodeError:
            raise AuthFailed("PLAIN user name is not UTF-8") from None
        if authz and authz != name:
            raise AuthFailed(f"PLAIN authorization id {authz[:64]!r} differs from the user "
                             "name (acting as another user is not supported)")
        account = self.acl.accounts.get(name)
        expected = account.secret_key.encode() if account is not None else os.urandom(16)
        if not hmac.compare_digest(expected, password) or account is None:
            raise AuthFailed(f"authentication failed for user {name[:64]!r} (unknown user or "
                             "wrong password)")
        self.account = account
        return b""


class ScramCredentials:
    """Salted credentials of the accounts, derived once per process (PBKDF2 is slow on
    purpose: 4096 rounds of HMAC-SHA-256 per account)."""

    def __init__(self, acl: AccessList, iterations: int = SCRAM_ITERATIONS) -> None:
        self.acl = acl
        self.iterations = iterations
        self._secret = secrets.token_bytes(32)     # makes unknown users' salts
        self._cache: dict[str, tuple[bytes, bytes, bytes]] = {}

    def lookup(self, user: str) -> tuple[bytes, bytes, bytes, Account | None]:
        """(salt, stored key, server key, account); made-up keys for an unknown user."""
        account = self.acl.accounts.get(user)
        if account is None:
            salt = hmac.new(self._secret, user.encode(), hashlib.sha256).digest()[:16]
            return salt, os.urandom(32), os.urandom(32), None
        got = self._cache.get(user)
        if got is None:
            salt = secrets.token_bytes(16)
            salted = hashlib.pbkdf2_hmac("sha256", account.secret_key.encode(), salt,
                                         self.iterations)
            client_key = _hmac(salted, b"Client Key")
            got = self._cache[user] = (salt, hashlib.sha256(client_key).digest(),
                                       _hmac(salted, b"Server Key"))
        return (*got, account)


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _attrs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if not sep or len(k) != 1:
            raise AuthFailed(f"SCRAM message attribute {part[:40]!r} is not a=value")
        out.setdefault(k, v)
    return out


def _saslname(name: str) -> str:
    """RFC 5802's escaping: ``=2C`` is a comma and ``=3D`` an equals sign."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise AuthFailed("SCRAM user name has a bad = escape")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramAuth:
    """RFC 5802 server side with SHA-256: client-first -> server-first (nonce, salt,
    iterations) -> client-final (proof) -> server-final (server signature)."""

    mechanism = SCRAM_SHA_256

    def __init__(self, creds: ScramCredentials) -> None:
        self.creds = creds
        self.account: Account | None = None
        self._state = 0
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._keys: tuple[bytes, bytes, Account | None] | None = None
        self._gs2 = ""

    @property
    def done(self) -> bool:
        return self._state == 2

    def step(self, token: bytes) -> bytes:
        if len(token) > MAX_TOKEN:
            raise AuthFailed(f"SCRAM message of {len(token)} bytes is too long")
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthFailed("SCRAM message is not UTF-8") from None
        if self._state == 0:
            return self._client_first(text)
        if self._state == 1:
            return self._client_final(text)
        raise AuthFailed("SCRAM exchange is already complete")

    def _client_first(self, text: str) -> bytes:
        flag, _, rest = text.partition(",")
        authzid, sep, bare = rest.partition(",")
        if not sep or flag not in ("n", "y"):
            if flag.startswith("p="):
                raise AuthFailed("SCRAM channel binding is not supported")
            raise AuthFailed("SCRAM client-first message does not start with a gs2 header")
        attrs = _attrs(bare)
        if "m" in attrs:
            raise AuthFailed("SCRAM mandatory extensions are not supported")
        user, cnonce = attrs.get("n"), attrs.get("r")
        if not user or not cnonce:
            raise AuthFailed("SCRAM client-first message lacks the user name or nonce")
        user = _saslname(user)
        if authzid and _saslname(authzid.removeprefix("a=")) != user:
            raise AuthFailed("SCRAM authorization id differs from the user name")
        salt, stored, server_key, account = self.creds.lookup(user)
        self._keys = (stored, server_key, account)
        self._gs2 = f"{flag},{authzid},"
        self._first_bare = bare
        self._nonce = cnonce + secrets.token_urlsafe(18)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(salt).decode()},"
                              f"i={self.creds.iterations}")
        self._user = user
        self._state = 1
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        without_proof, sep, proof_attr = text.rpartition(",")
        if not sep or not proof_attr.startswith("p="):
            raise AuthFailed("SCRAM client-final message does not end with the proof")
        attrs = _attrs(without_proof)
        if attrs.get("r") != self._nonce:
            raise AuthFailed("SCRAM nonce does not match the one the server sent")
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True).decode()
            proof = base64.b64decode(proof_attr[2:], validate=True)
        except (ValueError, UnicodeDecodeError):
            raise AuthFailed("SCRAM client-final message has bad base64") from None
        if binding != self._gs2:
            raise AuthFailed("SCRAM channel binding data does not match the gs2 header")
        assert self._keys is not None
        stored, server_key, account = self._keys
        auth_message = ",".join((self._first_bare, self._server_first, without_proof)).encode()
        client_key = bytes(a ^ b for a, b in zip(proof, _hmac(stored, auth_message)))
        if (len(proof) != 32 or account is None
                or not hmac.compare_digest(hashlib.sha256(client_key).digest(), stored)):
            raise AuthFailed(f"authentication failed for user {self._user[:64]!r} (unknown "
                             "user or wrong password)")
        self.account = account
        self._state = 2
        return b"v=" + base64.b64encode(_hmac(server_key, auth_message))


def start(mechanism: str, acl: AccessList, creds: ScramCredentials) -> PlainAuth | ScramAuth:
    """The server side of ``mechanism`` (one of MECHANISMS)."""
    if mechanism == PLAIN:
        return PlainAuth(acl)
    if mechanism == SCRAM_SHA_256:
        return ScramAuth(creds)
    raise AuthFailed(f"SASL mechanism {mechanism[:40]!r} is not supported (enabled: "
                     f"{', '.join(MECHANISMS)})")
