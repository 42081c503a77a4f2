"""A loopback TCP proxy for fault tests: forwards bytes both ways and cuts connections at the
three points where a lost connection means something different to a client:

* ``before``: the command never reaches Redis (its bytes are dropped, the connection closed);
* ``after``: the command reached Redis and ran, its reply is dropped and the connection closed;
* ``mid``: a prefix of the reply is forwarded, then the connection is closed.

Cuts are planned (``cut_next``: the next request, or the next containing a marker) or random:
each chunk a client sends is cut with probability ``rate`` at one of ``points``, drawn from
``random.Random(seed)`` so a failing run can be replayed with its seed. ``set_down(True)`` cuts
every connection and refuses new ones until ``set_down(False)``. Threads, two per connection.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Point = Literal["before", "after", "mid", "hold"]
POINTS: tuple[Point, ...] = ("before", "after", "mid")  # the cuts (``hold`` only by plan)


@dataclass
class _Plan:
    point: Point
    marker: bytes | None
    then_down: bool


class _Link:
    """One client connection and its connection to Redis; ``armed`` cuts the next reply."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.armed: _Plan | None = None
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class FaultyProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``, cutting as configured;
    ``cuts`` counts the cuts made, by point, ``cut_times`` says when."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        rate: float = 0.0,
        points: Iterable[Point] = POINTS,
        seed: int = 0,
    ) -> None:
        self.target = (target_host, target_port)
        self.rate = rate
        self.points = tuple(points)
        self.random = random.Random(seed)
        self.cuts: Counter[str] = Counter()
        self.cut_times: list[float] = []  # time.monotonic() of each cut
        self.requests = 0  # client chunks seen
        self.down = False
        self.lock = threading.Lock()
        self.plans: deque[_Plan] = deque()
        self.released = threading.Event()
        self.links: set[_Link] = set()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port: int = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    # -- control ------------------------------------------------------------------------

    def cut_next(self, point: Point, marker: bytes | None = None, then_down: bool = False) -> None:
        """Cut the next request (containing ``marker``, if given) at ``point``; with
        ``then_down``, refuse every connection from that cut on (until ``set_down(False)``),
        so the client's resends cannot get through."""
        with self.lock:
            self.plans.append(_Plan(point, marker, then_down))

    def hold_next(self, marker: bytes) -> None:
        """The next request containing ``marker`` reaches Redis and runs; its reply is held
        (the connection stays open) until :meth:`release`."""
        self.released.clear()
        self.cut_next("hold", marker)

    def release(self) -> None:
        self.released.set()

    def set_down(self, down: bool) -> None:
        """Down: cut every open connection and close new ones at once."""
        with self.lock:
            self.down = down
            links = list(self.links) if down else []
        for link in links:
            link.close()

    def close(self) -> None:
        self.set_down(True)
        self.listener.close()

    # Compatibility with the first version (tests/test_exactly_once.py).
    def drop_reply_after(self, marker: bytes) -> None:
        """The next request containing ``marker`` reaches Redis; its reply is dropped."""
        self.cut_next("after", marker)

    @property
    def dropped(self) -> int:
        return self.cuts["after"]

    # -- forwarding ---------------------------------------------------------------------

    def _decide(self, data: bytes) -> _Plan | None:
        with self.lock:
            self.requests += 1
            for plan in self.plans:
                if plan.marker is None or plan.marker in data:
                    self.plans.remove(plan)
                    return plan
            if self.rate and self.random.random() < self.rate:
                return _Plan(self.random.choice(self.points), None, False)
        return None

    def _cut(self, link: _Link, plan: _Plan) -> None:
        with self.lock:
            self.cuts[plan.point] += 1
            self.cut_times.append(time.monotonic())
            self.links.discard(link)
            if plan.then_down:
                self.down = True
        link.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            link = _Link(client, server)
            with self.lock:
                if self.down:
                    link.close()
                    continue
                self.links.add(link)
            threading.Thread(target=self._upstream, args=(link,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(link,), daemon=True).start()

    def _upstream(self, link: _Link) -> None:
        try:
            while data := link.client.recv(65536):
                plan = self._decide(data)
                if plan is not None and plan.point == "before":
                    return self._cut(link, plan)
                if plan is not None and link.armed is None:
                    link.armed = plan  # armed before sending: the reply cannot slip through
                link.server.sendall(data)
        except OSError:
            pass
        self._finish(link)

    def _downstream(self, link: _Link) -> None:
        try:
            while data := link.server.recv(65536):
                plan = link.armed
                if plan is not None and plan.point == "hold":
                    with self.lock:
                        self.cuts["hold"] += 1
                    self.released.wait(timeout=60)
                    link.armed = None
                elif plan is not None:
                    if plan.point == "mid" and len(data) > 1:
                        with self.lock:
                            keep = self.random.randrange(1, len(data))
                        link.client.sendall(data[:keep])
                    return self._cut(link, plan)
                link.client.sendall(data)
        except OSError:
            pass
        self._finish(link)

    def _finish(self, link: _Link) -> None:
        with self.lock:
            self.links.discard(link)
        if not link.closed:
            link.close()


# The first version's name: it only dropped replies.
DroppingProxy = FaultyProxy
