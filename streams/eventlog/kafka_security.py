"""How Engram's Kafka clients encrypt and log in: the settings as aiokafka's keyword arguments
and as Faust's broker credentials.

Every client of one process talks to one cluster under one identity, so the options are made
once per process (:func:`streams.eventlog.kafka_clients.use_security`) and every constructor
of :mod:`streams.eventlog.kafka_clients` adds them; the Faust app takes the same settings as
credentials. Both come from :class:`KafkaSecurity`, so the two cannot disagree.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka.helpers import create_ssl_context

from streams.settings import EngramSettings

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT

__all__ = ["KafkaSecurity", "aiokafka_security", "faust_credentials"]


@dataclass(frozen=True)
class KafkaSecurity:
    """The Kafka part of :class:`EngramSettings`, checked there
    (:func:`streams.settings.kafka_security_problem`)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None
    cafile: Path | None = None
    certfile: Path | None = None
    keyfile: Path | None = None

    @classmethod
    def from_settings(cls, settings: EngramSettings) -> KafkaSecurity:
        password = settings.kafka_sasl_password
        return cls(
            protocol=settings.kafka_security_protocol,
            sasl_mechanism=settings.kafka_sasl_mechanism,
            username=settings.kafka_sasl_username,
            password=None if password is None else password.get_secret_value(),
            cafile=settings.kafka_ssl_cafile,
            certfile=settings.kafka_ssl_certfile,
            keyfile=settings.kafka_ssl_keyfile,
        )

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext | None:
        """Verifies the broker's certificate and host name (against ``cafile``, else the
        system's CAs), and presents ``certfile`` for mutual TLS; None without TLS."""
        if not self.tls:
            return None
        context: ssl.SSLContext = create_ssl_context(
            cafile=self.cafile, certfile=self.certfile, keyfile=self.keyfile
        )
        return context

    def __repr__(self) -> str:  # the password stays out of logs and tracebacks
        return f"KafkaSecurity(protocol={self.protocol!r}, username={self.username!r})"


def aiokafka_security(
    security: KafkaSecurity, context: ssl.SSLContext | None = None
) -> dict[str, Any]:
    """The keyword arguments every ``AIOKafkaProducer``/``Consumer``/``AdminClient`` takes.

    aiokafka reads ``sasl_plain_username``/``sasl_plain_password`` for the SCRAM mechanisms
    too. ``context``: one made already (:meth:`KafkaSecurity.ssl_context`), so a process
    reads its certificate files once."""
    options: dict[str, Any] = {"security_protocol": security.protocol}
    if security.sasl:
        options |= {
            "sasl_mechanism": security.sasl_mechanism,
            "sasl_plain_username": security.username,
            "sasl_plain_password": security.password,
        }
    if security.tls:
        options["ssl_context"] = context or security.ssl_context()
    return options


def faust_credentials(
    security: KafkaSecurity, context: ssl.SSLContext | None = None
) -> CredentialsT | None:
    """Faust's ``broker_credentials`` for the same connection; None for PLAINTEXT. Faust
    turns them back into the options :func:`aiokafka_security` gives (its
    ``credentials_to_aiokafka_auth``), for its consumer, producer and admin client alike.

    Faust is imported here, not with the module: every command that publishes or reads the log
    goes through this module, and only a worker runs Faust (importing it costs such a command
    ~0.2 s of its start)."""
    from faust.auth import SASLCredentials, SSLCredentials

    if not (security.sasl or security.tls):
        return None
    if security.tls:
        context = context or security.ssl_context()
    if security.sasl:
        return SASLCredentials(
            username=security.username,
            password=security.password,
            ssl_context=context if security.tls else None,
            mechanism=security.sasl_mechanism,
        )
    return SSLCredentials(context)
