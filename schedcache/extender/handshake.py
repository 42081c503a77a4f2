"""The extender's TLS handshakes, done where a refusal can be seen: logged and counted.

asyncio's own server-side TLS drops a failed handshake without a word (it logs one only in
debug mode), so a kube-scheduler whose client certificate is missing, expired or from another
CA met a silent close, and so did the operator reading the extender's logs. The guard
(:mod:`.guard`) accepts plain TCP and upgrades each connection here with ``loop.start_tls``,
which raises what went wrong: the refusal becomes one log line naming the peer and the reason,
and ``schedcache_extender_tls_refused_total{reason}``. Lines are limited to one per reason
every :data:`LOG_EVERY` seconds (a scanner cannot flood the log); the counter counts them all.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

from prometheus_client import Counter

log = logging.getLogger(__name__)

TLS_REFUSED = Counter(
    "schedcache_extender_tls_refused_total",
    "TLS handshakes the extender refused: no_client_certificate, bad_client_certificate (not "
    "signed by --client-ca-file, expired, not for client auth), server_certificate_refused (the "
    "client does not trust the extender's), not_tls (plain HTTP or another protocol on the TLS "
    "port), timeout (no handshake within --read-timeout), aborted (the client went away), "
    "other.",
    ["reason"],
)
LOG_EVERY = 10.0  # seconds between two lines of one reason

# OpenSSL's reason codes (ssl.SSLError.reason), server side, by what they mean to an operator.
REASONS = {
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "no_client_certificate",
    "CERTIFICATE_VERIFY_FAILED": "bad_client_certificate",
    "TLSV1_ALERT_UNKNOWN_CA": "server_certificate_refused",
    "SSLV3_ALERT_BAD_CERTIFICATE": "server_certificate_refused",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "server_certificate_refused",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": "server_certificate_refused",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "server_certificate_refused",
    "HTTP_REQUEST": "not_tls",
    "WRONG_VERSION_NUMBER": "not_tls",
    "UNKNOWN_PROTOCOL": "not_tls",
}


def reason_of(error: BaseException) -> str:
    """The counter's label for a failed handshake."""
    if isinstance(error, ssl.SSLError):
        return REASONS.get(str(error.reason), "other")
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ConnectionError | EOFError):
        return "aborted"
    return "other"


class RefusalLog:
    """One line per reason every ``every`` seconds, saying how many were left unsaid."""

    def __init__(self, every: float = LOG_EVERY) -> None:
        self.every = every
        self.last: dict[str, float] = {}
        self.unsaid: dict[str, int] = {}

    def refused(self, peer: str, error: BaseException) -> str:
        reason = reason_of(error)
        TLS_REFUSED.labels(reason).inc()
        now = time.monotonic()
        if now - self.last.get(reason, -self.every) < self.every:
            self.unsaid[reason] = self.unsaid.get(reason, 0) + 1
            return reason
        self.last[reason] = now
        more = self.unsaid.pop(reason, 0)
        also = f" ({more} more since the last line)" if more else ""
        detail = str(error) or type(error).__name__
        log.warning("extender: TLS handshake from %s refused: %s: %s%s", peer, reason, detail, also)
        return reason


REFUSALS = RefusalLog()


def peer_of(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of the client, for the log."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = f"[{peer[0]}]" if ":" in str(peer[0]) else str(peer[0])
        return f"{host}:{peer[1]}"
    return str(peer)


async def upgrade(
    transport: asyncio.Transport,
    protocol: asyncio.BaseProtocol,
    context: ssl.SSLContext,
    timeout: float,
    refusals: RefusalLog = REFUSALS,
) -> asyncio.Transport | None:
    """The TLS transport of a connection accepted in plain TCP, or None (logged, counted,
    the connection closed) when the handshake fails. ``transport`` must not be reading yet."""
    peer = peer_of(transport)
    loop = asyncio.get_running_loop()
    try:
        upgraded = await loop.start_tls(
            transport, protocol, context, server_side=True, ssl_handshake_timeout=timeout
        )
    except (ssl.SSLError, OSError, EOFError, TimeoutError) as error:
        refusals.refused(peer, error)
        transport.abort()
        return None
    if upgraded is None:  # the loop could not upgrade (a transport closed meanwhile)
        transport.abort()
        return None
    return upgraded
