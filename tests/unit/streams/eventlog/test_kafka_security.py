"""Kafka TLS and SASL: the settings checked, and mapped alike for aiokafka and for Faust.

No broker here speaks TLS or SASL (the dev stack's does not), so the mapping is what is tested:
that every client gets the options aiokafka documents, and that Faust's own translation of the
credentials (``credentials_to_aiokafka_auth``) lands on the same options.
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from faust.auth import SASLCredentials, SSLCredentials
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import ValidationError

from streams.eventlog import kafka_clients
from streams.eventlog.kafka_security import KafkaSecurity, aiokafka_security, faust_credentials
from streams.settings import EngramSettings


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key, as a CA bundle and a client certificate."""
    directory = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "engram-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def settings(**values: Any) -> EngramSettings:
    return EngramSettings(**values)


def test_plaintext_adds_nothing_faust_would_not() -> None:
    security = KafkaSecurity.from_settings(settings())
    assert aiokafka_security(security) == {"security_protocol": "PLAINTEXT"}
    assert faust_credentials(security) is None


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_over_tls_logs_in_with_the_mechanism_and_verifies_the_broker(
    mechanism: str, pem: tuple[Path, Path]
) -> None:
    security = KafkaSecurity.from_settings(
        settings(
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_mechanism=mechanism,
            kafka_sasl_username="engram",
            kafka_sasl_password="s3cret",
            kafka_ssl_cafile=pem[0],
        )
    )
    options = aiokafka_security(security)
    context = options.pop("ssl_context")
    assert options == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "engram",
        "sasl_plain_password": "s3cret",
    }
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "engram-test"),),)]

    credentials = faust_credentials(security, context)
    assert isinstance(credentials, SASLCredentials)
    assert credentials_to_aiokafka_auth(credentials) == aiokafka_security(security, context)


def test_sasl_without_tls_sends_no_ssl_context() -> None:
    security = KafkaSecurity.from_settings(
        settings(
            kafka_security_protocol="SASL_PLAINTEXT",
            kafka_sasl_mechanism="SCRAM-SHA-256",
            kafka_sasl_username="engram",
            kafka_sasl_password="s3cret",
        )
    )
    options = aiokafka_security(security)
    assert "ssl_context" not in options
    assert options["security_protocol"] == "SASL_PLAINTEXT"
    credentials = faust_credentials(security)
    assert credentials_to_aiokafka_auth(credentials) == options | {"ssl_context": None}


def test_tls_alone_presents_the_client_certificate(pem: tuple[Path, Path]) -> None:
    security = KafkaSecurity.from_settings(
        settings(
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=pem[0],
            kafka_ssl_certfile=pem[0],
            kafka_ssl_keyfile=pem[1],
        )
    )
    options = aiokafka_security(security)
    assert options.keys() == {"security_protocol", "ssl_context"}
    assert options["security_protocol"] == "SSL"
    credentials = faust_credentials(security, options["ssl_context"])
    assert isinstance(credentials, SSLCredentials)
    assert credentials_to_aiokafka_auth(credentials) == options


async def test_every_client_built_after_use_security_carries_it() -> None:
    secured = settings(
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_username="engram",
        kafka_sasl_password="s3cret",
        kafka_sasl_mechanism="SCRAM-SHA-512",
    )
    try:
        kafka_clients.use_security(secured)
        producer = kafka_clients.record_producer("localhost:9")
        consumer = kafka_clients.log_reader("localhost:9")
        assert producer.client._security_protocol == "SASL_PLAINTEXT"
        assert producer.client._sasl_mechanism == "SCRAM-SHA-512"
        assert consumer._client._sasl_plain_username == "engram"
        admin = kafka_clients.admin_client("localhost:9")
        assert admin._client._security_protocol == "SASL_PLAINTEXT"
        await producer.stop()
        await consumer.stop()
        await admin.close()
    finally:
        kafka_clients.use_security(settings())
    assert kafka_clients.security_options() == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"kafka_security_protocol": "SASL_SSL"},
            "ENGRAM_KAFKA_SECURITY_PROTOCOL=SASL_SSL logs in with PLAIN: set "
            "ENGRAM_KAFKA_SASL_USERNAME and ENGRAM_KAFKA_SASL_PASSWORD",
        ),
        (
            {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_username": "engram"},
            "set ENGRAM_KAFKA_SASL_USERNAME and ENGRAM_KAFKA_SASL_PASSWORD",
        ),
        (
            {"kafka_sasl_username": "engram", "kafka_sasl_password": "s3cret"},
            "ENGRAM_KAFKA_SECURITY_PROTOCOL=PLAINTEXT does not log in: use SASL_SSL",
        ),
        (
            {
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_ssl_cafile": "CERT",
                "kafka_sasl_username": "engram",
                "kafka_sasl_password": "s3cret",
            },
            "ENGRAM_KAFKA_SSL_* files are set but ENGRAM_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT",
        ),
        (
            {"kafka_security_protocol": "SSL", "kafka_ssl_keyfile": "KEY"},
            "ENGRAM_KAFKA_SSL_KEYFILE needs ENGRAM_KAFKA_SSL_CERTFILE",
        ),
        (
            {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "GSSAPI"},
            "Input should be 'PLAIN', 'SCRAM-SHA-256' or 'SCRAM-SHA-512'",
        ),
    ],
)
def test_settings_that_cannot_work_together_are_refused_in_one_sentence(
    values: dict[str, Any], message: str, pem: tuple[Path, Path]
) -> None:
    files = {"CERT": str(pem[0]), "KEY": str(pem[1])}
    values = {k: files.get(v, v) if isinstance(v, str) else v for k, v in values.items()}
    with pytest.raises(ValidationError) as raised:
        settings(**values)
    assert message in str(raised.value)
    assert "s3cret" not in "".join(e["msg"] for e in raised.value.errors())


def test_a_certificate_file_that_is_not_there_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="kafka_ssl_cafile"):
        settings(kafka_security_protocol="SSL", kafka_ssl_cafile=tmp_path / "absent.pem")


def test_secrets_stay_out_of_the_settings_repr() -> None:
    shown = repr(
        settings(
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_username="engram",
            kafka_sasl_password="kafka-pass",
            redis_url="rediss://:redis-pass@redis:6380/0",
            keyring="rediss://:keyring-pass@redis:6380/1",
            api_key="api-pass",
        )
    )
    for secret in ("kafka-pass", "redis-pass", "keyring-pass", "api-pass"):
        assert secret not in shown
    assert "kafka-pass" not in repr(KafkaSecurity(password="kafka-pass"))


def test_the_redis_ca_file_reaches_every_client_through_the_url(pem: tuple[Path, Path]) -> None:
    url = settings(redis_url="rediss://:pw@redis:6380/0", redis_ssl_cafile=pem[0]).redis_url
    assert url == f"rediss://:pw@redis:6380/0?ssl_ca_certs={pem[0]}"
    kept = settings(redis_url="rediss://redis/0?ssl_ca_certs=/a", redis_ssl_cafile=pem[0])
    assert kept.redis_url == "rediss://redis/0?ssl_ca_certs=/a"  # the URL's own wins


def test_the_redis_ca_file_reaches_a_keyring_of_its_own(pem: tuple[Path, Path]) -> None:
    """deploy/README.md's keyring is a Redis of its own over TLS: it never got the CA."""
    chosen = settings(
        redis_url="rediss://:pw@redis:6380/0",
        keyring="rediss://:pw@keyring:6380/0",
        redis_ssl_cafile=pem[0],
    )
    assert chosen.keyring == f"rediss://:pw@keyring:6380/0?ssl_ca_certs={pem[0]}"
    for kind in ("redis", "off", f"file:{pem[1].parent}", "redis://plain:6379/1"):
        assert settings(keyring=kind, redis_ssl_cafile=pem[0]).keyring == kind
    # A plain connection takes no CA (redis-py raises TypeError on ssl_ca_certs there).
    plain = settings(redis_url="redis://redis:6379/0", redis_ssl_cafile=pem[0])
    assert plain.redis_url == "redis://redis:6379/0"
