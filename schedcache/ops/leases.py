"""Replica leases: a replica that dies between ``assume_pod`` and ``finish_binding`` must not
book its pods' resources forever.

While a replica assumes pods it heartbeats ``lease:<replica>`` (a key that expires after
``ttl``) from a daemon thread, and registers itself in ``replicas``. The expiry worker calls
``sc_forget_lapsed``: the unfinished assumed pods of a replica whose lease is gone are
forgotten (``PodForgotten``, reason ``lease-expired``). Pods whose binding finished are bounded
by their deadline instead.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref

from schedcache.store.store import Store

log = logging.getLogger(__name__)


class Lease:
    """The heartbeat of one replica's lease."""

    def __init__(self, store: Store, ttl: float) -> None:
        self.keys = store.keys
        self.client = store.client
        self.replica = store.replica
        self.ttl = ttl
        self.ttl_ms = max(1, round(ttl * 1000))
        self.interval = ttl / 3
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        # The thread must not keep the cache alive: it stops when the store is collected.
        self._owner = weakref.ref(store, lambda _: self.stopping.set())

    @property
    def key(self) -> str:
        return self.keys.lease(self.replica)

    def renew(self) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self.key, "1", px=self.ttl_ms)
        pipe.sadd(self.keys.replicas, self.replica)
        pipe.execute()

    def take(self) -> bool:
        """Take the lease now, unless a live process holds it (a second process with this
        replica name would keep the first one's claims alive, and share its lease). False when
        held: the caller refuses to start."""
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self.key, str(os.getpid()), px=self.ttl_ms, nx=True)
        pipe.sadd(self.keys.replicas, self.replica)
        taken, _ = pipe.execute()
        return bool(taken)

    def start(self) -> None:
        """Keep the lease alive in the background (``assume_pod`` takes it with the claim)."""
        if self.thread is not None:
            return
        # The thread keeps its own event: stop() replaces self.stopping (so the lease can be
        # started again), and a thread still renewing then must see the one stop() set.
        self.thread = threading.Thread(
            target=self._beat,
            args=(self.stopping,),
            name=f"schedcache-lease-{self.replica}",
            daemon=True,
        )
        self.thread.start()

    def _beat(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.interval):
            try:
                self.renew()
            except Exception as error:  # the heartbeat must outlive any outage
                log.warning(
                    "lease heartbeat of replica %s failed (%s: %s); trying again in %.1f s",
                    self.replica,
                    type(error).__name__,
                    error,
                    self.interval,
                )

    def stop(self, release: bool = False) -> None:
        """Stop heartbeating. The lease then lapses after its ttl, which leaves binds still in
        flight that long to finish; ``release`` drops it at once (the replica's unfinished
        claims are forgotten by the next expiry round)."""
        self.stopping.set()
        if self.thread is not None:
            # A renewal in flight ends within the socket timeout; after the join nothing
            # re-creates lease:<replica> or the replicas set (Cache.clear relies on it).
            self.thread.join(timeout=30)
            if self.thread.is_alive():
                log.warning("lease heartbeat of replica %s did not stop in 30 s", self.replica)
        self.thread = None
        self.stopping = threading.Event()
        if release:
            self.client.delete(self.key)


def default_replica(role: str) -> str:
    """A replica name no other live process has: ``<role>-<pod or host>-<pid>`` (the pod name
    from ``POD_NAME``, e.g. the downward API, else the hostname, which is the pod's name in
    Kubernetes). Shared names share a lease: a dead process's claims would never lapse."""
    where = os.environ.get("POD_NAME") or socket.gethostname() or "local"
    cleaned = "".join(c if c.isprintable() and not c.isspace() else "-" for c in where)
    return f"{role}-{cleaned}-{os.getpid()}"[:253]
