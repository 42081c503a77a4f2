"""Mutual TLS as kube-scheduler speaks it (``extenders[].tlsConfig``: certFile, keyFile,
caFile), with certificates reloaded when their files change (rotation without a restart).

The listening socket keeps one server context; its ``sni_callback`` (called on every
handshake, with or without a server name) hands the connection the newest context, built again
whenever one of the three files changed (by modification time, size and inode). A rotation
half-written (a key that does not match its certificate yet) keeps the previous context and
logs why; the next handshake tries again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)


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
