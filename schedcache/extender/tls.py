"""Mutual TLS as kube-scheduler speaks it (``extenders[].tlsConfig``: certFile, keyFile,
caFile), with certificates reloaded when their files change (rotation without a restart).

The listening socket keeps one server context; its ``sni_callback`` (called on every
handshake, with or without a server name) hands the connection the newest context, built again
whenever one of the three files changed (by modification time, size and inode). A rotation
half-written (a key that does not match its certificate yet) keeps the previous context and
logs why; the next handshake tries again.

A client whose handshake fails (no certificate, one the CA did not sign, no handshake within
the read timeout, not TLS at all) is refused: counted by reason in
``schedcache_extender_tls_refused_total`` and logged, one line per reason at most every
``Refusals.interval`` seconds (the line says how many it stands for), so a scan or a flood
cannot fill the logs.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

log = logging.getLogger(__name__)

REFUSED = Counter(
    "schedcache_extender_tls_refused_total",
    "TLS clients refused during the handshake, by reason: no_certificate (none sent), "
    "bad_certificate (not signed by --client-ca-file, expired, wrong usage), "
    "handshake_timeout (no handshake within --read-timeout), handshake_failed (not TLS, an "
    "old version), closed (the client closed the connection during its handshake; not "
    "logged).",
    ["reason"],
)
# What each reason means in a log line.
REASONS = {
    "no_certificate": "it sent no client certificate",
    "bad_certificate": "its certificate was not accepted",
    "handshake_timeout": "its handshake did not end in time",
    "handshake_failed": "its handshake failed",
    "closed": "it closed the connection during its handshake",
}
# Counted, not logged: a TCP probe of the port (a load balancer's, the kubelet's tcpSocket)
# closes without a handshake every few seconds.
QUIET = frozenset({"closed"})


@dataclass(frozen=True)
class TlsFiles:
    """The server's certificate and key, and the CA client certificates must chain to."""

    cert_file: str
    key_file: str
    client_ca_file: str

    def stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.cert_file, self.key_file, self.client_ca_file):
            info = os.stat(path)
            stamps.append((info.st_mtime_ns, info.st_size, info.st_ino))
        return tuple(stamps)

    def context(self) -> ssl.SSLContext:
        """A server context requiring a client certificate from the CA (TLS 1.2 or newer)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.client_ca_file)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


class ReloadingContext:
    """``.server`` is the context to listen with; every handshake gets the newest files'."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.lock = threading.Lock()
        self.stamp = files.stamp()
        self.current = files.context()  # errors here stop the start, naming the file
        self.reloads = 0
        self.server = files.context()
        self.server.sni_callback = self._pick

    def _pick(self, connection: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
        connection.context = self.newest()
        return None

    def newest(self) -> ssl.SSLContext:
        with self.lock:
            try:
                stamp = self.files.stamp()
                if stamp != self.stamp:
                    self.current = self.files.context()
                    self.stamp = stamp
                    self.reloads += 1
                    log.info("extender: TLS certificates reloaded from %s", self.files.cert_file)
            except (OSError, ssl.SSLError) as error:  # mid-rotation: keep what worked
                log.warning("extender: TLS files not reloaded (%s); keeping the previous", error)
            return self.current


def refusal_reason(error: BaseException) -> str:
    """Which of :data:`REASONS` a failed handshake is."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return "bad_certificate"
    if isinstance(error, ssl.SSLError):
        reason = getattr(error, "reason", "") or ""
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "no_certificate"
        if "CERTIFICATE" in reason:  # unknown CA, expired, bad usage, ...
            return "bad_certificate"
    if isinstance(error, TimeoutError) or "longer than" in str(error) or "timed out" in str(error):
        return "handshake_timeout"
    if isinstance(error, (ConnectionResetError, BrokenPipeError)):
        return "closed"  # the client went before its handshake ended: a TCP probe, a scan
    return "handshake_failed"


class Refusals:
    """Counts refused handshakes and logs them, one line per reason per ``interval`` s."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self.clock = clock
        self.logged: dict[str, float] = {}  # reason -> when its last line was written
        self.unlogged: Tally[str] = Tally()  # refusals since that line
        self.lock = threading.Lock()

    def refused(self, error: BaseException, peer: Any) -> str:
        """Count (and maybe log) one refusal; its reason."""
        reason = refusal_reason(error)
        REFUSED.labels(reason).inc()
        if reason in QUIET:
            log.debug("extender: TLS client %s: %s", peer, REASONS[reason])
            return reason
        now = self.clock()
        with self.lock:
            last = self.logged.get(reason)
            if last is not None and now - last < self.interval:
                self.unlogged[reason] += 1
                return reason
            self.logged[reason] = now
            more = self.unlogged.pop(reason, 0)
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
        since = f" ({more} more such since the last line)" if more else ""
        log.warning(
            "extender: TLS client %s refused: %s (%s)%s",
            address,
            REASONS[reason],
            _short(error),
            since,
        )
        return reason


def _short(error: BaseException) -> str:
    """The error in a few words: the OpenSSL reason when there is one."""
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason:
        return reason
    return type(error).__name__
