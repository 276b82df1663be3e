"""`strata serve --tls-cert FILE --tls-key FILE`: gRPC over TLS, driven by the official
client in TLS mode (it trusts the test's self-signed certificate through gRPC's
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH); bad certificate or key files stop the start."""

import datetime
import ipaddress
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import strata
from broker_support import SMALL_STORE, run_client

pytestmark = pytest.mark.broker


def make_cert(directory: Path, name: str = "server") -> tuple[Path, Path]:
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
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_official_client_over_tls(broker_factory, tmp_path, monkeypatch):
    cert, key = make_cert(tmp_path)
    other_cert, _ = make_cert(tmp_path, "other")
    b = broker_factory("--tls-cert", str(cert), "--tls-key", str(key))
    assert ", tls" in b.log
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(cert))   # the client trusts it
    got = run_client(tmp_path, b.endpoint, '''
    p = Producer(config(), ("secure",), tls_enable=True)
    p.startup()
    ids = [p.send(message("secure", "m%d" % i)).message_id for i in range(3)]
    p.shutdown()
    c = SimpleConsumer(config(), "g", {"secure": FilterExpression("*")}, await_duration=2,
                       tls_enable=True)
    c.startup()
    got = []
    for _ in range(5):
        for m in c.receive(32, 30):
            got.append(m.body.decode())
            c.ack(m)
        if len(got) >= 3:
            break
    c.shutdown()
    def route(channel):
        s = MessagingServiceStub(channel)
        try:
            r = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name="secure")),
                             metadata=meta(), timeout=5)
            return pb.Code.Name(r.status.code)
        except grpc.RpcError as exc:
            return exc.code().name
    roots = open(json.loads(sys.argv[2]), "rb").read()
    out(ids=len(set(ids)), got=sorted(got), plaintext=route(grpc.insecure_channel(ENDPOINT)),
        untrusted=route(grpc.secure_channel(ENDPOINT, grpc.ssl_channel_credentials(roots))))
    ''', args=str(other_cert))
    assert got["ids"] == 3
    assert got["got"] == ["m0", "m1", "m2"]
    assert got["plaintext"] == "UNAVAILABLE"      # no TLS, no service
    assert got["untrusted"] == "UNAVAILABLE"      # a client that does not trust the cert
    assert b.stop() == 0
    with strata.open(b.directory, readonly=True) as store:
        assert store.topics() == ["secure"]


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(tmp_path / "store"),
           "--listen", "127.0.0.1:0", *args]
    for opt in SMALL_STORE:
        cmd += ["--store-option", opt]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_bad_certificate_or_key_files_stop_the_start(tmp_path):
    cert, key = make_cert(tmp_path)
    _, other_key = make_cert(tmp_path, "other")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    missing = tmp_path / "missing.pem"
    cases = [
        ((str(missing), str(key)), f"--tls-cert {missing}: cannot read it"),
        ((str(cert), str(missing)), f"--tls-key {missing}: cannot read it"),
        ((str(junk), str(key)), f"--tls-cert {junk}: no PEM certificate"),
        ((str(cert), str(junk)), f"--tls-key {junk}: no PEM private key"),
        ((str(cert), str(other_key)), "cannot be used together"),
    ]
    for (c, k), expected in cases:
        p = _serve(tmp_path, "--tls-cert", c, "--tls-key", k)
        assert p.returncode != 0, expected
        assert expected in p.stderr, p.stderr
        assert "listening on" not in p.stderr
        assert not (tmp_path / "store").exists()
    p = _serve(tmp_path, "--tls-cert", str(cert))
    assert p.returncode != 0 and "--tls-cert and --tls-key go together" in p.stderr
    assert not (tmp_path / "store").exists()


def test_push_consumer_with_keys_over_tls_and_metrics(broker_factory, tmp_path, monkeypatch):
    """--tls-cert/--tls-key, --acl and --metrics together: a push consumer (QueryAssignment,
    Heartbeat with its group, receives, acks) signed with its keys gets every message."""
    cert, key = make_cert(tmp_path)
    acl = tmp_path / "acl.yml"
    acl.write_text("accounts:\n"
                   "  - {accessKey: pusher01, secretKey: pushsecret, topicPerms: [pushed=PUB]}\n"
                   "  - {accessKey: reader01, secretKey: readsecret, topicPerms: [pushed=SUB],"
                   " groupPerms: [pg=SUB]}\n")
    b = broker_factory("--tls-cert", str(cert), "--tls-key", str(key), "--acl", str(acl),
                       "--metrics", "127.0.0.1:0")
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(cert))
    got = run_client(tmp_path, b.endpoint, '''
    from rocketmq import PushConsumer, MessageListener, ConsumeResult
    import threading, urllib.request
    def cfg(ak, sk):
        return ClientConfiguration(ENDPOINT, Credentials(ak, sk), request_timeout=5)
    p = Producer(cfg("pusher01", "pushsecret"), ("pushed",), tls_enable=True)
    p.startup()
    for i in range(10):
        p.send(message("pushed", "p%d" % i))
    p.shutdown()
    seen = set()
    lock = threading.Lock()
    class L(MessageListener):
        def consume(self, m):
            with lock:
                seen.add(m.body.decode())
            return ConsumeResult.SUCCESS
    c = PushConsumer(cfg("reader01", "readsecret"), "pg", L(),
                     {"pushed": FilterExpression("*")}, tls_enable=True)
    c.startup()
    t0 = time.time()
    while len(seen) < 10 and time.time() - t0 < 30:
        time.sleep(0.1)
    c.shutdown()
    text = urllib.request.urlopen(json.loads(sys.argv[2]), timeout=10).read().decode()
    out(seen=sorted(seen), text=text)
    ''', args=re.search(r"metrics (http://\S+/metrics)", b.log).group(1))
    assert got["seen"] == sorted(f"p{i}" for i in range(10))
    assert 'strata_messages_sent_total{topic="pushed"} 10.0' in got["text"]
    assert 'strata_messages_acked_total{group="pg",topic="pushed"} 10.0' in got["text"]
    assert 'code="UNAUTHORIZED"' not in got["text"] and 'code="FORBIDDEN"' not in got["text"]
    assert b.stop() == 0
