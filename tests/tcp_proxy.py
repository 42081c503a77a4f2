"""A loopback TCP proxy for fault tests: forwards bytes both ways, and can drop the reply to a
request containing a marker (the command ran on the server, the client never hears back)."""

from __future__ import annotations

import socket
import threading


class DroppingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = self.listener.getsockname()[1]
        self.marker: bytes | None = None
        self.dropped = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_reply_after(self, marker: bytes) -> None:
        """The next request containing ``marker`` reaches Redis; its reply is dropped and the
        connection cut."""
        with self.lock:
            self.marker = marker

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            armed = threading.Event()
            threading.Thread(
                target=self._upstream, args=(client, server, armed), daemon=True
            ).start()
            threading.Thread(
                target=self._downstream, args=(server, client, armed), daemon=True
            ).start()

    def _upstream(
        self, client: socket.socket, server: socket.socket, armed: threading.Event
    ) -> None:
        try:
            while data := client.recv(65536):
                with self.lock:
                    if self.marker is not None and self.marker in data:
                        self.marker = None
                        armed.set()
                server.sendall(data)
        except OSError:
            pass

    def _downstream(
        self, server: socket.socket, client: socket.socket, armed: threading.Event
    ) -> None:
        try:
            while data := server.recv(65536):
                if armed.is_set():
                    self.dropped += 1
                    for sock in (client, server):
                        sock.shutdown(socket.SHUT_RDWR)
                        sock.close()
                    return
                client.sendall(data)
        except OSError:
            pass
