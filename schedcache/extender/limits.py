"""What one extender process may hold: the bounds of the HTTP side, in one place.

The defaults are sized from what kube-scheduler sends (docs/extender.md, "Bounds"): a filter or
prioritize body is one ``v1.Pod`` (the API server accepts at most 3 MiB of JSON for one object)
plus the candidate node names (5,000 nodes, kube's tested scale, of at most 253 characters:
5,000 x 256 B = 1.25 MiB), so 6 MiB leaves room; a bind body is four short strings.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
# What one open connection may hold, handshake included: asyncio's TLS read buffer (256 KiB,
# zeroed, so resident), OpenSSL's state and aiohttp's handler; 470-620 KiB measured under a
# flood of connections that never finish their handshake (tests/test_extender_tls_flood.py).
CONNECTION_BYTES = 640 * 1024
# What the pending pods' watch may hold (extender/pending.py): PENDING_BYTES (16 MiB) of pods'
# JSON, decoded (up to 5.2x measured), and one list page of at most PAGE_BYTES (4 MiB) with
# its decoded form (up to 10x, as a body). A relist drops the kept pods before it lists.
PENDING_WATCH_BYTES = 6 * 16 * MIB + 11 * 4 * MIB


@dataclass(frozen=True)
class Limits:
    """Bounds of the HTTP side; every one is a command-line option of ``schedcache extender``."""

    max_body_bytes: int = 6 * MIB  # filter / prioritize
    max_bind_body_bytes: int = 64 * 1024  # bind: ExtenderBindingArgs, four strings
    max_connections: int = 256  # open connections; more are closed at once
    header_timeout: float = 30.0  # a request line and headers must arrive within this
    body_timeout: float = 30.0  # a body must arrive within this once its headers did
    queue_timeout: float = 10.0  # a request waits this long for a verb slot, then 503
    # On SIGTERM, verbs already running (a bind's Binding) may finish within this; then they
    # are answered 503, outcome unknown. Under Kubernetes' default 30 s grace before SIGKILL.
    drain_timeout: float = 25.0
    filter_concurrency: int = 4  # filter requests decoded and run at once
    prioritize_concurrency: int = 4
    bind_concurrency: int = 16  # binds wait on the API server: more of them, each small

    def concurrency(self, verb: str) -> int:
        return int(getattr(self, f"{verb}_concurrency"))

    def body_limit(self, verb: str) -> int:
        return self.max_bind_body_bytes if verb == "bind" else self.max_body_bytes

    def memory_ceiling(self, base: int = 160 * MIB, pending_watch: bool = True) -> int:
        """The published ceiling of the process's resident memory: the base (interpreter,
        libraries, snapshot of a 1,000-node cache) plus, per request that may hold a body at
        once, the body and its decoded form (Python objects take up to 10x the JSON), plus
        what each connection may hold (``CONNECTION_BYTES``; TLS handshakes count), plus the
        pending pods' watch's pods (``pending_watch``: an API server and no
        ``--no-pending-watch``)."""
        bodies = (self.filter_concurrency + self.prioritize_concurrency) * self.max_body_bytes
        binds = self.bind_concurrency * self.max_bind_body_bytes
        watch = PENDING_WATCH_BYTES if pending_watch else 0
        return base + 11 * (bodies + binds) + self.max_connections * CONNECTION_BYTES + watch
