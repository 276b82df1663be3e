"""TLS for ``strata serve --tls-cert FILE --tls-key FILE``: the PEM certificate chain and
private key, checked at startup (readable, PEM, the key matches the certificate) so that a
mistake is a clear error rather than failed handshakes later."""

from __future__ import annotations

import ssl
from pathlib import Path

from strata.errors import InvalidConfigError


def _read(path: Path, option: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"{option} {path}: cannot read it "
                                 f"({exc.strerror or exc})") from None


def check_pair(cert: Path, key: Path) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a PEM certificate (chain) and its PEM private key, once
    they are known to work together; InvalidConfigError naming the file and the problem."""
    cert_pem = _read(cert, "--tls-cert")
    key_pem = _read(key, "--tls-key")
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        raise InvalidConfigError(f"--tls-cert {cert}: no PEM certificate in it "
                                 "(-----BEGIN CERTIFICATE-----)")
    if b"PRIVATE KEY-----" not in key_pem:
        raise InvalidConfigError(f"--tls-key {key}: no PEM private key in it "
                                 "(-----BEGIN ... PRIVATE KEY-----)")
    if b"ENCRYPTED" in key_pem:
        raise InvalidConfigError(f"--tls-key {key}: the key is encrypted; gRPC needs it "
                                 "unencrypted (protect the file instead, e.g. mode 0600)")
    server_context(cert, key)
    return cert_pem, key_pem


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 and later) for a listener that does TLS itself (Kafka);
    InvalidConfigError when the pair cannot be used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:       # a password callback: an encrypted key must not prompt on the terminal
        context.load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError as exc:
        raise InvalidConfigError(f"--tls-cert {cert} / --tls-key {key}: cannot be used "
                                 f"together ({exc.reason or exc}); the key must be the "
                                 "certificate's, both unencrypted PEM") from None
    return context
