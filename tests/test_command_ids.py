"""Command ids: what makes a resent command recognisable must never repeat, in one process or
across the processes a fork makes (replica workers, the CLI's children)."""

from __future__ import annotations

import os

from schedcache.store.commands import add_pod, new_command_id
from tests.factories import make_pod


def test_ids_never_repeat_in_a_process() -> None:
    ids = {new_command_id() for _ in range(100_000)}
    ids |= {add_pod(make_pod(f"p{i}", "n1")).id for i in range(1_000)}
    assert len(ids) == 101_000


def test_a_forked_child_draws_ids_of_its_own() -> None:
    """Without a new prefix after fork the child would count on from the parent's counter,
    and the parent's next id would be the child's first: the same id for two commands."""
    before = new_command_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then leave at once
        os.write(write, new_command_id().encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    parent = new_command_id()
    assert status == 0 and child and child != parent
    assert child[:16] != before[:16] and parent[:16] == before[:16]
