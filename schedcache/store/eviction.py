"""Whether the Redis server holding a cache may evict its keys (``maxmemory-policy``).

Any policy but ``noeviction`` lets Redis delete keys to make room: ``allkeys-*`` any key,
``volatile-*`` keys with a time to live — a cache's leases, remembered replies and tombstones,
whose loss forgets live claims or lets a resend apply twice. A cache missing some of its keys
is corrupt; one missing its stream cannot even be audited. So ``verify`` reports such a policy
as a difference and the long-running processes refuse to start on it (docs/storage.md#memory).

The policy is read with ``CONFIG GET``, which the embedded fakeredis lacks (it never evicts: it
has no ``maxmemory``) and which restricted ACL users are not granted (it would also show the
server's passwords): then the check says it could not tell, and leaves the decision to an admin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

SAFE_POLICY = "noeviction"
RESTRICTED = (
    "this Redis user may not run CONFIG GET (restricted users are not granted it): an admin "
    "checks maxmemory-policy (`schedcache verify` as the admin)"
)


@dataclass(frozen=True)
class EvictionCheck:
    """``policy``: the server's ``maxmemory-policy`` (None: unknown, ``why`` says why)."""

    policy: str | None
    why: str = ""

    @property
    def evicts(self) -> bool:
        return self.policy is not None and self.policy != SAFE_POLICY

    def problem(self, cache: str) -> str:
        """The message for a policy that can evict ``cache``'s keys."""
        return (
            f"Redis' maxmemory-policy is {self.policy}: it can evict the keys of cache {cache} "
            f"(a cache missing keys is corrupt, one missing its stream cannot be audited); set "
            f"`CONFIG SET maxmemory-policy {SAFE_POLICY}` and size maxmemory as docs/storage.md "
            "says (Memory)"
        )


def check_eviction(server: Any, allowed: bool = True) -> EvictionCheck:
    """The eviction policy of ``server`` (the plain client of the cache's primary); ``allowed``:
    whether this user may run CONFIG GET (``Store.may_read_config``: not asked otherwise, so a
    restricted user's check leaves no refusal in the ACL LOG)."""
    if type(server).__module__.startswith("fakeredis"):
        return EvictionCheck(None, "the embedded fakeredis has no CONFIG GET (and never evicts)")
    if not allowed:
        return EvictionCheck(None, RESTRICTED)
    try:
        reply = server.config_get("maxmemory-policy")
    except redis.exceptions.NoPermissionError:
        return EvictionCheck(None, RESTRICTED)
    except redis.ResponseError as error:
        return EvictionCheck(None, f"CONFIG GET maxmemory-policy failed: {error}")
    policy = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
    if policy is None:
        return EvictionCheck(None, "the server did not name its maxmemory-policy")
    return EvictionCheck(policy.decode() if isinstance(policy, bytes) else str(policy))
