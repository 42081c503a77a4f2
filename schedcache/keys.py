"""Every Redis key of one cache, in one place.

All keys of a cache share the prefix ``{<name>}:``: the braces are a Redis Cluster hash tag,
so every key of one cache lives in one slot and each Lua function touches a single slot. The
Lua side builds the same names from the prefix it gets as ``KEYS[1]``; the schema with one line
per key is at the top of ``lua/_helpers.lua``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schedcache.errors import ValidationError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class Keys:
    """Key names of the cache called ``name``."""

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValidationError(
                "cache",
                "name",
                f"{self.name!r} must be 1-63 letters, digits, '.', '_' or '-', starting with a "
                "letter or digit",
            )

    @property
    def prefix(self) -> str:
        return f"{{{self.name}}}:"

    def pod(self, uid: str) -> str:
        return f"{self.prefix}pod:{uid}"

    def node(self, name: str) -> str:
        return f"{self.prefix}node:{name}"

    def node_pods(self, name: str) -> str:
        return f"{self.prefix}nodepods:{name}"

    def node_images(self, name: str) -> str:
        return f"{self.prefix}nodeimgs:{name}"

    def image_nodes(self, image: str) -> str:
        return f"{self.prefix}imgnodes:{image}"

    @property
    def images(self) -> str:
        return f"{self.prefix}images"

    @property
    def nodes(self) -> str:
        return f"{self.prefix}nodes"

    @property
    def pods(self) -> str:
        return f"{self.prefix}pods"

    @property
    def assumed(self) -> str:
        return f"{self.prefix}assumed"

    @property
    def deadlines(self) -> str:
        return f"{self.prefix}deadlines"

    @property
    def generation(self) -> str:
        return f"{self.prefix}gen"

    @property
    def node_generations(self) -> str:
        return f"{self.prefix}nodegen"

    @property
    def events(self) -> str:
        return f"{self.prefix}events"

    @property
    def pattern(self) -> str:
        """A SCAN/ACL pattern matching every key of this cache."""
        return f"{{{self.name}}}:*"
