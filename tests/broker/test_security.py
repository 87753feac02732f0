"""SASL and TLS with real clients: the right password in, a wrong one out, and a client that
has not authenticated reads, writes and learns nothing; TLS with a certificate the test makes
and clients that trust it (alone and under SASL)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import struct

import pytest

from kdelay import Broker, Topic
from kdelay.broker.security.credentials import add_user

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sasl") / "users")
    add_user(path, "alice", "alice-secret", iterations=4096)
    return path


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and localhost, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                  serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return str(d / "cert.pem"), str(d / "key.pem")


def make_root(tmp_path) -> str:
    root = str(tmp_path / "root")
    Topic.open(root, "secure", partitions=1).close()
    return root


def confluent_produce(bootstrap: str, extra: dict) -> list:
    """Produce one record; the delivery reports (errors included) it got."""
    reports: list = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1,
                                         "message.timeout.ms": 8000,
                                         "socket.timeout.ms": 5000, **extra})
    producer.produce("secure", b"v", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(15)
    return reports


def stored_records(root: str) -> int:
    with Topic.open(root, "secure") as topic:
        return topic.partition(0).log_end_offset


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_right_passwords_get_in_with_confluent_and_kafka_python(tmp_path, users, mechanism):
    root = make_root(tmp_path)
    with Broker(root, listen="127.0.0.1:0", sasl_users=users) as broker:
        assert confluent_produce(broker.bootstrap_servers, {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": "alice", "sasl.password": "alice-secret"}) == [None]
        producer = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism, sasl_plain_username="alice",
            sasl_plain_password="alice-secret", request_timeout_ms=10000)
        producer.send("secure", b"x").get(timeout=30)
        producer.close()
    assert stored_records(root) == 2


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_is_refused_and_writes_nothing(tmp_path, users, mechanism):
    root = make_root(tmp_path)
    with Broker(root, listen="127.0.0.1:0", sasl_users=users) as broker:
        wrong = confluent_produce(broker.bootstrap_servers, {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": "alice", "sasl.password": "nope", "message.timeout.ms": 2000})
        assert len(wrong) == 1 and wrong[0] is not None
        # api_version given: kafka-python skips its 30 s bootstrap probe and fails the send
        bad = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password="nope",
            max_block_ms=2000, api_version=(2, 6))
        with pytest.raises(kafka.errors.KafkaError):
            bad.send("secure", b"y").get(timeout=10)
        bad.close(timeout=0)
    assert stored_records(root) == 0


def frame(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 1) + b"x"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_an_unauthenticated_raw_produce_writes_nothing_and_is_disconnected(tmp_path, users):
    root = make_root(tmp_path)
    with Broker(root, listen="127.0.0.1:0", sasl_users=users) as broker:
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        from kafka.record.default_records import DefaultRecordBatchBuilder
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1,
                                            base_sequence=-1, batch_size=1 << 16)
        builder.append(0, timestamp=1, key=None, value=b"sneaky", headers=[])
        batch = bytes(builder.build())
        # Produce v3: transactional_id null, acks 1, timeout, [topic [partition records]]
        body = (struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", 1)
                + struct.pack(">h", 6) + b"secure" + struct.pack(">i", 1)
                + struct.pack(">ii", 0, len(batch)) + batch)
        for api_key, version, payload in ((0, 3, body), (3, 1, struct.pack(">i", -1))):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(frame(api_key, version, payload))
                assert s.recv(4) == b""  # closed without an answer: nothing learned
    assert stored_records(root) == 0


def test_tls_alone_and_under_sasl(tmp_path, users, certificate):
    cert, key = certificate
    root = make_root(tmp_path)
    with Broker(root, listen="127.0.0.1:0", tls_cert=cert, tls_key=key) as broker:
        assert confluent_produce(broker.bootstrap_servers, {
            "security.protocol": "SSL", "ssl.ca.location": cert}) == [None]
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                                       security_protocol="SSL", ssl_cafile=cert,
                                       request_timeout_ms=10000)
        producer.send("secure", b"x").get(timeout=30)
        producer.close()
        # a plaintext client gets nowhere on a TLS listener
        untrusted = confluent_produce(broker.bootstrap_servers, {"message.timeout.ms": 3000})
        assert untrusted[0] is not None
    with Broker(root, listen="127.0.0.1:0", tls_cert=cert, tls_key=key,
                sasl_users=users) as broker:
        assert confluent_produce(broker.bootstrap_servers, {
            "security.protocol": "SASL_SSL", "ssl.ca.location": cert,
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": "alice-secret"}) == [None]
    assert stored_records(root) == 3


def test_a_bad_certificate_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate")
    from kdelay.broker.errors import BrokerConfigError
    with pytest.raises(BrokerConfigError, match="cert.pem"):
        Broker(make_root(tmp_path), listen="127.0.0.1:0", tls_cert=str(bad), tls_key=str(bad))
    with pytest.raises(BrokerConfigError, match="both"):
        Broker(make_root(tmp_path), listen="127.0.0.1:0", tls_cert=str(bad))
