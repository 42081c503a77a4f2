"""Every Redis key of one cache, in one place.

All keys of a cache share the prefix ``{<name>}:``: the braces are a Redis Cluster hash tag,
so every key of one cache lives in one slot and each Lua function touches a single slot.

:data:`SCHEMA` is the one list of those keys (name pattern, Redis type, what it holds). The
:class:`Keys` methods build their names from its patterns, never retyped, and
``tests/test_key_schema.py`` keeps the schema comment at the top of ``lua/_helpers.lua`` and the
table in ``docs/storage.md`` in step with it, and checks that a live cache holds no other key.
The Lua side builds the same names from the prefix it gets as ``KEYS[1]``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from schedcache.errors import ValidationError

SCHEMA_VERSION: Final = 2
"""The version of the stored layout and of the event fields (the events' ``v``): 2 keeps a
node's pods in a zset scored by placement generation (1 used a set; ``schedcache migrate``
converts a cache of schema 1, see docs/storage.md). The Lua
library gets it from ``schedcache/store/library.py``, which prepends
``local SCHEMA_VERSION = '<n>'`` to the library text, so Python and Lua cannot disagree."""

RedisType = Literal["string", "hash", "set", "zset", "stream"]
"""A key's type as Redis' ``TYPE`` names it."""


@dataclass(frozen=True)
class KeySpec:
    """One key of a cache: its name after the prefix (``<...>`` marks a variable part), its
    Redis type and, in one line, what it holds."""

    pattern: str
    type: RedisType
    holds: str


SCHEMA: Final[tuple[KeySpec, ...]] = (
    KeySpec(
        "pod:<uid>",
        "string",
        '"<state> <node> <finished> <deadline> <gen> <claimer> <contribution>\\n<msgpack Pod>"',
    ),
    KeySpec("node:<name>", "hash", "the node entry: exists, zone, blob and its counters"),
    KeySpec("nodepods:<name>", "zset", "uids of the node's pods, scored by placement generation"),
    KeySpec("nodeimgs:<name>", "set", "image names the live node reports"),
    KeySpec("nodelabels:<name>", "hash", "the live node's labels (l:<key>) and their count (ln)"),
    KeySpec("imgnodes:<image>", "set", "live nodes that report the image"),
    KeySpec("images", "hash", "image name -> size in bytes (the first size reported wins)"),
    KeySpec("imagegen", "zset", "image name -> generation of the last change of its node count"),
    KeySpec("treezones", "zset", "zone keys of live nodes, in first-insertion order"),
    KeySpec("treezone:<zone>", "zset", "live nodes of the zone, in insertion order"),
    KeySpec("treegen", "string", "generation of the last change of the tree's membership"),
    KeySpec("treecursor", "hash", "sc_tree_next's cursor: zi (zone index), z:<zone> (index)"),
    KeySpec("nodes", "set", "every node entry: live, ghost and placeholder"),
    KeySpec("pods", "set", "every pod uid in the cache"),
    KeySpec("assumed", "set", "uids of assumed pods"),
    KeySpec("deadlines", "zset", "uid -> expiry deadline (ms) of assumed pods whose binding ended"),
    KeySpec("gen", "string", "the cache's generation counter (INCR)"),
    KeySpec("incarnation", "string", "server TIME when gen was created: '<seconds>.<micros>'"),
    KeySpec("antipods", "string", "placed pods with required anti-affinity (nodes' anti, summed)"),
    KeySpec("quarantine", "zset", "uid -> time (ms): deadlines of corrupt pod records, set aside"),
    KeySpec("nodegen", "zset", "node name -> generation of its last change (with tombstones)"),
    KeySpec("events", "stream", "the history: one entry per applied command"),
    KeySpec("lastevent", "string", "the id of the stream's last event, written with it"),
    KeySpec("cmd:<id>", "string", "the reply of an applied command, for a retry (expires)"),
    KeySpec("absent", "set", "never written: set type checks intersect with it (SINTER)"),
    KeySpec("replicas", "set", "replicas that hold (or held) a lease"),
    KeySpec("lease:<replica>", "string", "the replica's lease, kept alive by its heartbeat"),
    KeySpec("replicapods:<replica>", "set", "pods the replica assumed, binding not finished"),
    KeySpec(
        "version:pod:<uid>", "string", "newest resourceVersion a feeder applied (tombstone 1 h)"
    ),
    KeySpec(
        "version:node:<name>", "string", "newest resourceVersion a feeder applied (tombstone 1 h)"
    ),
    KeySpec(
        "version:podgroup:<group>",
        "string",
        "newest resourceVersion a feeder applied (tombstone 1 h)",
    ),
    KeySpec("podgroup:<group>", "hash", "a PodGroup as sync fed it: min, timeout (s, or '')"),
    KeySpec("podgroups", "set", "the PodGroups the cache holds: '<namespace>/<name>'"),
    KeySpec("sync", "hash", "feeders' progress: <resource>:rv, <resource>:at (ms), <resource>:by"),
    KeySpec("checkpoint", "hash", "the stored checkpoint: id, generation, chunk prefix, count"),
    KeySpec("checkpoint:<id>:<token>:<n>", "string", "chunk n of a checkpoint (msgpack)"),
    KeySpec("checkpoint:parts", "hash", "chunk prefix -> chunk count of every checkpoint written"),
    KeySpec("compacted", "string", "the first stream id still replayable from the stream"),
    KeySpec("retention", "string", "the lease of the retention worker doing the current round"),
    KeySpec(
        "queued:<uid>",
        "string",
        '"<state> <scheduler> <priority> <seq> <attempts> <due> <holder>\\n<msgpack Pod>"',
    ),
    KeySpec("nominated", "zset", "uid -> deadline (ms) of every nomination (lua/_nominations.lua)"),
    KeySpec("nomnode", "hash", "uid -> the node it is nominated to"),
    KeySpec("nom:<node>", "hash", 'uid -> "<priority> <deadline ms> <contribution>"'),
    KeySpec("nomvictims", "hash", 'uid -> a nominee\'s victims, "<namespace>/<name> ..."'),
    KeySpec("pdbs", "hash", '"<namespace>/<name>" -> a PodDisruptionBudget (lua/sync_budget.lua)'),
    KeySpec(
        "version:pdb:<key>", "string", "newest resourceVersion a feeder applied (tombstone 1 h)"
    ),
    KeySpec("namespaces", "hash", "namespace -> its labels, JSON (lua/sync_namespace.lua)"),
    KeySpec("nsgen", "string", "bumped by every change of a namespace's labels (INCR)"),
    KeySpec(
        "version:ns:<name>", "string", "newest resourceVersion a feeder applied (tombstone 1 h)"
    ),
    KeySpec("queuedpods", "set", "the uids of every queued (pending) pod"),
    KeySpec("queueseq", "string", "the scheduling queue's arrival counter (one SET a call)"),
    KeySpec("queues", "hash", "scheduler -> '<id>[ <score>]': wake cursor of its parked pods"),
    KeySpec("helped", "string", "the id of the last event that could help a parked pod"),
    KeySpec("arrivalwakes", "zset", "'<key>=<value>' or '*' -> until when (ms) it is awaited"),
    KeySpec("arrivalsince", "hash", "the same token -> the stream id it is awaited from"),
    KeySpec("queue:<scheduler>:active", "zset", '"<seq>:<uid>" scored -priority: pop order'),
    KeySpec("queue:<scheduler>:leased", "zset", "uid -> lease deadline (ms) of popped pods"),
    KeySpec("queue:<scheduler>:backoff", "zset", "uid -> end of its back-off (ms)"),
    KeySpec("queue:<scheduler>:parked", "zset", "uid -> when an unschedulable pod returns (ms)"),
    KeySpec(
        "gangwait:<group>",
        "hash",
        "a pod group's members seen pending: uid -> msgpack Pod, since -> wait start (ms);"
        " placed:<uid> -> 1 for members its gang claims placed",
    ),
    KeySpec("gangwaits", "set", "the groups with a gangwait:<group> (expires with the newest)"),
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_PLACEHOLDER = re.compile(r"<([a-z]+)>")


def _template(pattern: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``pattern`` split into its literal texts and the names of its placeholders (one more
    literal than names: ``"a:<x>:<y>"`` -> ``(("a:", ":", ""), ("x", "y"))``)."""
    pieces = _PLACEHOLDER.split(pattern)
    return tuple(pieces[0::2]), tuple(pieces[1::2])


_TEMPLATES: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    spec.pattern: _template(spec.pattern) for spec in SCHEMA
}


# Each pattern as a format string ("pod:<uid>" -> "pod:{uid}"); a placeholder left unfilled is
# a KeyError, and tests/test_key_schema.py calls every Keys member.
_FORMATS: Final[dict[str, str]] = {
    spec.pattern: _PLACEHOLDER.sub(r"{\1}", spec.pattern) for spec in SCHEMA
}


def _fill(pattern: str, parts: Mapping[str, object], *, partial: bool = False) -> str:
    """The key name (without the cache's prefix) of the :data:`SCHEMA` entry ``pattern``,
    its placeholders replaced by ``parts``. ``partial`` fills only the leading placeholders
    given and stops before the first one left: the prefix shared by all keys that continue
    from there (the chunk keys of one checkpoint)."""
    literals, names = _TEMPLATES[pattern]  # KeyError: not a key of the schema
    wanted = names[: len(parts)] if partial else names
    if set(parts) != set(wanted):
        raise TypeError(f"key {pattern!r} takes {', '.join(wanted) or 'nothing'}, not {parts}")
    text = [literals[0]]
    for name, literal in zip(wanted, literals[1:], strict=False):
        text += [str(parts[name]), literal]
    return "".join(text)


@dataclass(frozen=True)
class Keys:
    """Key names of the cache called ``name``: one method or property per :data:`SCHEMA`
    entry Python reads or writes, each built from the entry's pattern."""

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
        """``{<name>}:``, the start of every key (and the ``KEYS[1]`` of every function)."""
        return f"{{{self.name}}}:"

    @property
    def pattern(self) -> str:
        """A SCAN/ACL pattern matching every key of this cache."""
        return f"{{{self.name}}}:*"

    def _key(self, pattern: str, **parts: object) -> str:
        # str.format of the pattern, compiled once: key names are built on hot paths.
        return self.prefix + _FORMATS[pattern].format_map(parts)

    # -- pods and nodes -------------------------------------------------------------------

    def pod(self, uid: str) -> str:
        return self._key("pod:<uid>", uid=uid)

    def node(self, name: str) -> str:
        return self._key("node:<name>", name=name)

    def node_pods(self, name: str) -> str:
        return self._key("nodepods:<name>", name=name)

    def node_images(self, name: str) -> str:
        return self._key("nodeimgs:<name>", name=name)

    def node_labels(self, name: str) -> str:
        return self._key("nodelabels:<name>", name=name)

    def image_nodes(self, image: str) -> str:
        return self._key("imgnodes:<image>", image=image)

    @property
    def images(self) -> str:
        return self._key("images")

    @property
    def image_generations(self) -> str:
        return self._key("imagegen")

    @property
    def nodes(self) -> str:
        return self._key("nodes")

    @property
    def pods(self) -> str:
        return self._key("pods")

    @property
    def assumed(self) -> str:
        return self._key("assumed")

    @property
    def deadlines(self) -> str:
        return self._key("deadlines")

    @property
    def quarantine(self) -> str:
        return self._key("quarantine")

    # -- the node tree --------------------------------------------------------------------

    @property
    def tree_zones(self) -> str:
        return self._key("treezones")

    def tree_zone(self, zone: str) -> str:
        return self._key("treezone:<zone>", zone=zone)

    @property
    def tree_generation(self) -> str:
        return self._key("treegen")

    @property
    def tree_cursor(self) -> str:
        return self._key("treecursor")

    # -- generations and history ----------------------------------------------------------

    @property
    def generation(self) -> str:
        return self._key("gen")

    @property
    def incarnation(self) -> str:
        return self._key("incarnation")

    @property
    def anti_affine_pods(self) -> str:
        return self._key("antipods")

    @property
    def node_generations(self) -> str:
        return self._key("nodegen")

    @property
    def events(self) -> str:
        return self._key("events")

    @property
    def last_event(self) -> str:
        """The id of the stream's last event, written with it (lua/_helpers.lua, emit)."""
        return self._key("lastevent")

    def command_reply(self, command_id: str) -> str:
        return self._key("cmd:<id>", id=command_id)

    @property
    def absent(self) -> str:
        """Never written: the functions type-check several sets at once by intersecting them
        with it (``expect_sets`` in ``lua/_helpers.lua``)."""
        return self._key("absent")

    # -- replicas -------------------------------------------------------------------------

    @property
    def replicas(self) -> str:
        return self._key("replicas")

    def lease(self, replica: str) -> str:
        return self._key("lease:<replica>", replica=replica)

    def replica_pods(self, replica: str) -> str:
        return self._key("replicapods:<replica>", replica=replica)

    # -- nominations (lua/_nominations.lua) -------------------------------------------------

    @property
    def nominated(self) -> str:
        return self._key("nominated")

    @property
    def nominated_nodes(self) -> str:
        return self._key("nomnode")

    def nominations(self, node: str) -> str:
        return self._key("nom:<node>", node=node)

    @property
    def nomination_victims(self) -> str:
        return self._key("nomvictims")

    # -- PodDisruptionBudgets (lua/sync_budget.lua) -----------------------------------------

    @property
    def budgets(self) -> str:
        return self._key("pdbs")

    def budget_version(self, key: str) -> str:
        return self._key("version:pdb:<key>", key=key)

    # -- Namespaces (lua/sync_namespace.lua) -------------------------------------------------

    @property
    def namespaces(self) -> str:
        return self._key("namespaces")

    @property
    def namespace_generation(self) -> str:
        return self._key("nsgen")

    def namespace_version(self, name: str) -> str:
        return self._key("version:ns:<name>", name=name)

    # -- feeders ----------------------------------------------------------------------------

    def pod_version(self, uid: str) -> str:
        return self._key("version:pod:<uid>", uid=uid)

    def node_version(self, name: str) -> str:
        return self._key("version:node:<name>", name=name)

    @property
    def sync(self) -> str:
        return self._key("sync")

    # -- the scheduling queue ---------------------------------------------------------------

    def queued(self, uid: str) -> str:
        return self._key("queued:<uid>", uid=uid)

    def pod_group(self, group: str) -> str:
        """A PodGroup fed by sync (``<namespace>/<name>``; store/podgroups.py)."""
        return self._key("podgroup:<group>", group=group)

    def pod_group_version(self, group: str) -> str:
        return self._key("version:podgroup:<group>", group=group)

    @property
    def pod_groups(self) -> str:
        return self._key("podgroups")

    @property
    def gang_waits(self) -> str:
        """The groups that have a wait (no SCAN: restricted users get none, ops/acl.py)."""
        return self._key("gangwaits")

    def gang_wait(self, group: str) -> str:
        """A pod group's wait (``<namespace>/<name>``; scheduler/gang.py, docs/gangs.md)."""
        return self._key("gangwait:<group>", group=group)

    @property
    def queued_pods(self) -> str:
        return self._key("queuedpods")

    @property
    def queue_sequence(self) -> str:
        return self._key("queueseq")

    @property
    def queues(self) -> str:
        return self._key("queues")

    @property
    def helped(self) -> str:
        """The id of the last event that could help a parked pod (lua/_queue.lua)."""
        return self._key("helped")

    @property
    def arrival_wakes(self) -> str:
        """Labels parked pods wait for a pod with to arrive (lua/_wakes.lua)."""
        return self._key("arrivalwakes")

    @property
    def arrival_since(self) -> str:
        """The stream id each awaited label is awaited from (lua/_wakes.lua)."""
        return self._key("arrivalsince")

    def queue(self, scheduler: str, state: str) -> str:
        """``scheduler``'s sorted set of pods in ``state`` (active, leased, backoff, parked)."""
        return self._key(f"queue:<scheduler>:{state}", scheduler=scheduler)

    # -- checkpoints and retention --------------------------------------------------------

    @property
    def checkpoint(self) -> str:
        return self._key("checkpoint")

    @property
    def checkpoint_parts(self) -> str:
        return self._key("checkpoint:parts")

    @property
    def checkpoint_chunks(self) -> str:
        """The prefix of every checkpoint's chunk keys (``checkpoint:``)."""
        return self.prefix + _fill("checkpoint:<id>:<token>:<n>", {}, partial=True)

    def checkpoint_chunk_prefix(self, checkpoint_id: str, token: str) -> str:
        """The prefix of the chunk keys one writer stores checkpoint ``checkpoint_id`` under
        (``token`` keeps concurrent writers apart); chunk ``n`` is this plus ``n``."""
        parts = {"id": checkpoint_id, "token": token}
        return self.prefix + _fill("checkpoint:<id>:<token>:<n>", parts, partial=True)

    def checkpoint_chunk(self, checkpoint_id: str, token: str, n: int) -> str:
        return self._key("checkpoint:<id>:<token>:<n>", id=checkpoint_id, token=token, n=n)

    def checkpoint_id(self, chunk_prefix: str) -> str:
        """The stream id a chunk prefix (or chunk key) was written for."""
        return chunk_prefix.removeprefix(self.checkpoint_chunks).split(":", 1)[0]

    @property
    def compacted(self) -> str:
        return self._key("compacted")

    @property
    def retention(self) -> str:
        return self._key("retention")
