"""Access control: RocketMQ's ``plain_acl.yml`` accounts, the AK/SK request signature
(``MQv2-HMAC-SHA1``), and the decision whether an account may publish to or subscribe on a
topic or group. Pure code: no sockets, no gRPC (``strata.broker.rocketmq.authorize`` applies it to the
RPCs).

A request is signed with its ``x-mq-date-time`` header only, so a captured ``authorization``
header would work for any request; a signature is therefore accepted only while its
timestamp is within ``window_s`` of the broker's clock (the reference broker never checks).
"""

from __future__ import annotations

import calendar
import enum
import functools
import hashlib
import hmac
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from strata.broker.errors import InvalidAclError, InvalidGroupError
from strata.broker.names import check_group, check_topic
from strata.errors import InvalidTopicError

SCHEME = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
AUTH_HEADER = "authorization"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
DEFAULT_WINDOW_S = 300
MIN_KEY_CHARS = 6      # RocketMQ's own lower bound for access and secret keys

ACCOUNT_KEYS = {"accessKey", "secretKey", "admin", "topicPerms", "groupPerms",
                "defaultTopicPerm", "defaultGroupPerm", "whiteRemoteAddress"}
FILE_KEYS = {"accounts", "globalWhiteRemoteAddresses", "dataVersion"}


class Perm(enum.IntFlag):
    """A right on a topic or group; ANY is what a route lookup needs (PUB or SUB)."""

    NONE = 0
    PUB = 1
    SUB = 2
    ANY = 4     # needed only, never granted


_PERM_TEXT = {"DENY": Perm.NONE, "PUB": Perm.PUB, "SUB": Perm.SUB,
              "PUB|SUB": Perm.PUB | Perm.SUB, "SUB|PUB": Perm.PUB | Perm.SUB}


def perm_name(p: Perm) -> str:
    return {Perm.PUB: "PUB", Perm.SUB: "SUB", Perm.ANY: "PUB or SUB"}.get(p, str(p))


def granted(owned: Perm, needed: Perm) -> bool:
    if needed is Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return (owned & needed) == needed


class Kind(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    topic_perms: Mapping[str, Perm] = field(default_factory=dict)
    group_perms: Mapping[str, Perm] = field(default_factory=dict)
    default_topic_perm: Perm = Perm.NONE
    default_group_perm: Perm = Perm.NONE

    def owns(self, kind: Kind, name: str) -> Perm:
        """The rights this account has on a topic or group (admin: all of them)."""
        if self.admin:
            return Perm.PUB | Perm.SUB
        if kind is Kind.TOPIC:
            return self.topic_perms.get(name, self.default_topic_perm)
        return self.group_perms.get(name, self.default_group_perm)


class Refusal(Exception):
    """A request the ACL refuses. ``forbidden``: the caller is who it says, but lacks the
    right (FORBIDDEN); otherwise it is not authenticated (UNAUTHORIZED)."""

    def __init__(self, message: str, *, forbidden: bool = False) -> None:
        super().__init__(message)
        self.forbidden = forbidden


def sign(secret_key: str, date_time: str) -> str:
    """The hex HMAC-SHA1 signature a client sends for ``date_time``."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


@functools.lru_cache(maxsize=4096)      # a client's header changes once a second
def _parse_authorization(value: str) -> tuple[tuple[str, str], ...]:
    """``MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX`` ->
    the (name, value) fields; Refusal if malformed."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        raise Refusal(f"authorization header uses scheme {scheme[:40]!r}; this broker "
                      f"accepts {SCHEME}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        k, sep, v = part.strip().partition("=")
        if sep:
            fields[k.strip()] = v.strip()
    for k in ("Credential", "SignedHeaders", "Signature"):
        if not fields.get(k):
            raise Refusal(f"authorization header has no {k}")
    signed = {h.strip().lower() for h in fields["SignedHeaders"].split(";")}
    if DATE_HEADER not in signed:
        raise Refusal(f"the signature does not cover {DATE_HEADER}")
    return tuple(fields.items())


@functools.lru_cache(maxsize=1024)
def _timestamp(date_time: str) -> int:
    """Seconds since the epoch of a ``YYYYMMDDTHHMMSSZ`` stamp (read as UTC)."""
    try:
        return calendar.timegm(time.strptime(date_time, DATE_FORMAT))
    except ValueError:
        raise Refusal(f"{DATE_HEADER} {date_time[:40]!r} is not YYYYMMDDTHHMMSSZ") from None


class AccessList:
    """The accounts of one ACL file, and the checks a request goes through."""

    def __init__(self, accounts: Iterable[Account], *, window_s: int = DEFAULT_WINDOW_S,
                 source: str = "") -> None:
        self.accounts = {a.access_key: a for a in accounts}
        self.window_s = window_s
        self.source = source
        self._expected: dict[tuple[str, str], bytes] = {}

    def authenticate(self, metadata: Iterable[tuple[str, str]],
                     now_s: float | None = None) -> Account:
        """The account whose secret key signed this request; Refusal saying why not."""
        headers: dict[str, str] = {}
        for k, v in metadata or ():
            if k in (AUTH_HEADER, DATE_HEADER) and isinstance(v, str):
                headers.setdefault(k, v)
        auth = headers.get(AUTH_HEADER)
        if not auth:
            raise Refusal("the request is not signed (no authorization header); this broker "
                          "requires an access key and secret key")
        fields = dict(_parse_authorization(auth))
        date_time = headers.get(DATE_HEADER)
        if not date_time:
            raise Refusal(f"the request has no {DATE_HEADER} header")
        account = self.accounts.get(fields["Credential"])
        if account is None:
            raise Refusal(f"unknown access key {fields['Credential'][:64]!r}")
        # the HMAC of one account and second, computed once; compared in constant time
        expected = self._expected.get((account.access_key, date_time))
        if expected is None:
            if len(self._expected) >= 4096:
                self._expected.clear()
            expected = self._expected[(account.access_key, date_time)] = \
                sign(account.secret_key, date_time).encode()
        if not hmac.compare_digest(expected, fields["Signature"].lower().encode()):
            raise Refusal(f"signature mismatch for access key {account.access_key!r} (wrong "
                          "secret key?)")
        stamped = _timestamp(date_time)
        skew = stamped - (time.time() if now_s is None else now_s)
        if abs(skew) > self.window_s:
            when = "ahead of" if skew > 0 else "behind"
            raise Refusal(f"{DATE_HEADER} {date_time} is {abs(skew):.0f} s {when} the broker's "
                          f"clock (UTC); signatures are accepted within {self.window_s} s, so "
                          "a captured one cannot be replayed (official clients stamp their "
                          "local time: run them with TZ=UTC or widen --acl-time-window)")
        return account

    @staticmethod
    def authorize(account: Account, needs: Iterable[tuple[Kind, str, Perm]]) -> None:
        """Refusal(forbidden=True) naming the first right ``account`` lacks."""
        for kind, name, needed in needs:
            if not granted(account.owns(kind, name), needed):
                raise Refusal(f"access key {account.access_key!r} has no {perm_name(needed)} "
                              f"right on {kind.value} {name!r}", forbidden=True)


# ---------------------------------------------------------------------- the file


def load_acl(path: Path, *, window_s: int = DEFAULT_WINDOW_S) -> AccessList:
    """Read a ``plain_acl.yml``; InvalidAclError naming the file and the problem."""
    import yaml     # the broker extra (PyYAML)

    where = f"ACL file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidAclError(f"{where}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
                              ) from None
    try:
        # BaseLoader keeps every scalar a string: a secretKey of 0123 stays "0123"
        doc = yaml.load(text, Loader=yaml.BaseLoader)
    except yaml.YAMLError as exc:
        raise InvalidAclError(f"{where}: not valid YAML: {exc}") from None
    return AccessList(parse_acl(doc, where), window_s=window_s, source=str(path))


def parse_acl(doc: object, where: str = "ACL") -> list[Account]:
    """The accounts of a loaded ``plain_acl.yml`` document (all scalars strings)."""
    if not isinstance(doc, dict):
        raise InvalidAclError(f"{where}: expected a mapping with an 'accounts:' list")
    unknown = sorted(set(doc) - FILE_KEYS)
    if unknown:
        raise InvalidAclError(f"{where}: unknown key {unknown[0]!r} (known: "
                              f"{', '.join(sorted(FILE_KEYS))})")
    if doc.get("globalWhiteRemoteAddresses"):
        raise InvalidAclError(f"{where}: globalWhiteRemoteAddresses is not supported (strata "
                              "requires a signature on every request); remove it")
    raw = doc.get("accounts")
    if not isinstance(raw, list) or not raw:
        raise InvalidAclError(f"{where}: 'accounts:' must be a non-empty list")
    accounts: list[Account] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw, 1):
        acc = _account(entry, f"{where}: account {i}")
        if acc.access_key in seen:
            raise InvalidAclError(f"{where}: account {i}: accessKey {acc.access_key!r} is "
                                  "listed twice")
        seen.add(acc.access_key)
        accounts.append(acc)
    return accounts


def _account(entry: object, where: str) -> Account:
    if not isinstance(entry, dict):
        raise InvalidAclError(f"{where}: expected a mapping (accessKey, secretKey, ...)")
    unknown = sorted(set(entry) - ACCOUNT_KEYS)
    if unknown:
        raise InvalidAclError(f"{where}: unknown key {unknown[0]!r} (known: "
                              f"{', '.join(sorted(ACCOUNT_KEYS))})")
    keys = {}
    for name in ("accessKey", "secretKey"):
        v = entry.get(name)
        if not isinstance(v, str) or len(v) < MIN_KEY_CHARS:
            raise InvalidAclError(f"{where}: {name} must be a string of at least "
                                  f"{MIN_KEY_CHARS} characters")
        keys[name] = v
    where = f"{where} (accessKey {keys['accessKey']!r})"
    if entry.get("whiteRemoteAddress"):
        raise InvalidAclError(f"{where}: whiteRemoteAddress is not supported (strata requires "
                              "a signature on every request); remove it")
    admin = entry.get("admin", "false")
    if not isinstance(admin, str) or admin.lower() not in ("true", "false"):
        raise InvalidAclError(f"{where}: admin must be true or false, not {admin!r}")
    return Account(keys["accessKey"], keys["secretKey"], admin.lower() == "true",
                   _perms(entry.get("topicPerms"), Kind.TOPIC, where),
                   _perms(entry.get("groupPerms"), Kind.GROUP, where),
                   _perm(entry.get("defaultTopicPerm", "DENY"), f"{where}: defaultTopicPerm"),
                   _perm(entry.get("defaultGroupPerm", "DENY"), f"{where}: defaultGroupPerm"))


def _perm(text: object, where: str) -> Perm:
    p = _PERM_TEXT.get(text.strip().upper()) if isinstance(text, str) else None
    if p is None:
        raise InvalidAclError(f"{where}: permission {text!r} is not one of DENY, PUB, SUB, "
                              "PUB|SUB")
    return p


def _perms(raw: object, kind: Kind, where: str) -> dict[str, Perm]:
    key = "topicPerms" if kind is Kind.TOPIC else "groupPerms"
    if raw in (None, ""):
        return {}
    if not isinstance(raw, list):
        raise InvalidAclError(f"{where}: {key} must be a list of NAME=PERM entries")
    out: dict[str, Perm] = {}
    for item in raw:
        name, sep, perm = item.partition("=") if isinstance(item, str) else ("", "", "")
        name = name.strip()
        if not sep:
            raise InvalidAclError(f"{where}: {key} entry {item!r} is not NAME=PERM")
        try:
            check_topic(name) if kind is Kind.TOPIC else check_group(name)
        except (InvalidTopicError, InvalidGroupError) as exc:
            raise InvalidAclError(f"{where}: {key} entry {item!r}: {exc}") from None
        if name in out:
            raise InvalidAclError(f"{where}: {key} lists {kind.value} {name!r} twice")
        out[name] = _perm(perm, f"{where}: {key} entry {item!r}")
    return out
