"""The Store: one cache's Redis. Reads reload a lost library once; ``WAIT`` replies are judged
in one place; every caller (facade, batch, node tree, expiry worker) sends its functions with
the one argument convention."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from schedcache.errors import NotReplicated, ValidationError
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store import commands
from schedcache.store.batch import CommandBatch
from schedcache.store.library import function_name, library_name, library_version
from schedcache.store.store import Store
from tests.factories import make_node, make_pod


def test_read_reloads_a_lost_library_once(cache, backend):
    store = cache.store
    version = store.read(lambda: store.server().fcall_ro(function_name("version"), 0))
    assert version == library_version().encode()
    if backend == "redis":
        return  # the shared server: deleting its library would disturb concurrent tests
    store.server().function_delete(library_name())
    calls: list[int] = []

    def call() -> Any:
        calls.append(1)
        return store.server().fcall_ro(function_name("version"), 0)

    assert store.read(call) == library_version().encode() and len(calls) == 2


def test_check_replicated_judges_wait_replies(cache):
    store = cache.store
    store.wait_replicas = 2  # as a replicated server's store would have it (fakeredis refuses)
    store.check_replicated(2, "sc_x")
    store.check_replicated(b"3", "sc_x")
    with pytest.raises(NotReplicated, match="sc_x: applied on the primary, but only 1 of 2") as e:
        store.check_replicated(1, "sc_x", reply=7)
    assert e.value.reply == 7
    with pytest.raises(redis.ResponseError, match="boom"):
        store.check_replicated(redis.ResponseError("boom"), "sc_x")


def test_every_caller_sends_functions_through_the_store(cache, monkeypatch):
    """The facade, batches, the node tree and the expiry worker build their FCALLs with
    ``Store.function_args``: one convention (prefix, replica, command id, arguments)."""
    seen: list[str] = []
    original = Store.function_args

    def recording(self: Store, name: str, command_id: str, args: Any) -> list[Any]:
        seen.append(name)
        return original(self, name, command_id, args)

    monkeypatch.setattr(Store, "function_args", recording)
    cache.add_node(make_node("n1", "2", "1Gi"))
    with cache.batch() as batch:
        batch.add_pod(make_pod("p1", "n1", "100m", "1Mi"))
    cache.node_tree().next()
    ExpiryWorker(cache).run_once()
    assert seen == ["add_node", "batch", "tree_next", "cleanup_assumed_pods", "forget_lapsed"]


def test_a_batch_of_a_bare_store_takes_commands_and_refuses_the_shortcuts(cache):
    bare = CommandBatch(cache.store)
    bare.add(commands.add_node(make_node("n1", "2", "1Gi")))
    assert [result.ok for result in bare.execute()] == [True]
    with pytest.raises(ValidationError, match="bare Store has no ttl or lease"):
        bare.finish_binding(make_pod("p1", "n1"))
    assert cache.node_count() == 1
