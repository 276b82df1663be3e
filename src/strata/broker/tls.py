"""TLS for ``strata serve --tls-cert FILE --tls-key FILE``: the PEM certificate chain and
private key, checked at startup (readable, PEM, the key matches the certificate) so that a
mistake is a clear error rather than failed handshakes later."""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from strata.errors import InvalidConfigError


def _read(path: Path, option: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"{option} {path}: cannot read it "
                                 f"({exc.strerror or exc})") from None


def server_credentials(cert: Path, key: Path) -> grpc.ServerCredentials:
    """gRPC server credentials from a PEM certificate (chain) and its PEM private key;
    InvalidConfigError naming the file and the problem."""
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
    try:       # a password callback: an encrypted key must not prompt on the terminal
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError as exc:
        raise InvalidConfigError(f"--tls-cert {cert} / --tls-key {key}: cannot be used "
                                 f"together ({exc.reason or exc}); the key must be the "
                                 "certificate's, both unencrypted PEM") from None
    return grpc.ssl_server_credentials([(key_pem, cert_pem)])
