"""`strata serve --kafka ... --tls-cert FILE --tls-key FILE`: the Kafka listener speaks TLS
(confluent-kafka with security.protocol=SSL trusting the test's self-signed certificate); a
plaintext client gets no answer."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kafka_support import run_client

pytestmark = pytest.mark.kafka


def make_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "strata test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


TLS_ROUND_TRIP = '''
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
tls = {"security.protocol": "SSL", "ssl.ca.location": ARGS["ca"]}
p = Producer({"bootstrap.servers": BOOTSTRAP, **tls})
for i in range(5):
    p.produce("secure", value=b"s%d" % i, partition=0)
left = p.flush(120)
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "tls", **tls})
c.assign([TopicPartition("secure", 0, 0)])
got = []
deadline = time.time() + 20
while len(got) < 5 and time.time() < deadline:
    m = c.poll(1)
    if m is not None and not m.error():
        got.append(m.value().decode())
c.close()
plain = AdminClient({"bootstrap.servers": BOOTSTRAP, "socket.timeout.ms": 2000})
try:
    plain.list_topics(timeout=3)
    plain_ok = True
except Exception:
    plain_ok = False
out(left=left, got=got, plain_ok=plain_ok)
'''


def test_kafka_over_tls(kafka_factory, tmp_path):
    cert, key = make_cert(tmp_path)
    s = kafka_factory("--tls-cert", str(cert), "--tls-key", str(key))
    assert ", tls" in s.log
    got = run_client(TLS_ROUND_TRIP, s.bootstrap, dict(ca=str(cert)))
    assert got == dict(left=0, got=[f"s{i}" for i in range(5)], plain_ok=False)
