"""The global options every command reads (``Settings``): where Redis is, which cache, how
patiently to talk to it. Subcommands import it from here, never from ``app`` (the group that
registers them), so no module of the CLI imports one that imports it back."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import click

from schedcache.cache import Cache
from schedcache.store.connection import EMBEDDED, ENV_URL, NoAnswer, connect, describe
from schedcache.store.retry import DEFAULT_RETRY, NO_RETRY
from schedcache.store.routing import PRIMARY
from schedcache.store.store import Client

ENV_CACHE = "SCHEDCACHE_CACHE"
ENV_TIMEOUT = "SCHEDCACHE_TIMEOUT"
TIMEOUT_SETTING = f"--timeout, or ${ENV_TIMEOUT}"  # what a NoAnswer names as its wait's setting


@dataclass
class Settings:
    """The global options: where Redis is and how patiently to talk to it."""

    url: str | None
    cache_name: str
    timeout: float = 5.0
    retry_for: float = DEFAULT_RETRY.within
    wait_replicas: int = 0
    wait_timeout: float = 1.0
    cache_given: bool = False  # --cache on the command line (not the env var or the default)
    embedded: bool = False  # --embedded: the embedded backend on purpose
    read_from: str = PRIMARY  # --read-from: where snapshot updates read

    @classmethod
    def for_completion(cls, ctx: click.Context) -> Settings | None:
        """The settings the command line being completed gives (the group's callback does not
        run while the shell asks for candidates), patient for one second at most; None on the
        embedded backend, which holds nothing to offer."""
        params = ctx.find_root().params
        url, name = params.get("url"), params.get("cache_name")
        if not isinstance(url, str) or url == EMBEDDED or not isinstance(name, str):
            return None
        timeout = params.get("timeout")
        timeout = min(timeout, 1.0) if isinstance(timeout, float) else 1.0
        return cls(url, name, timeout=timeout, retry_for=0.0)

    def is_shared(self) -> bool:
        """A real Redis that other processes can reach (not the embedded default)."""
        return bool(self.url) and self.url != EMBEDDED

    def note_if_embedded(self, effect: str) -> None:
        """Say on stderr that ``effect`` is gone with this process (the embedded backend), so
        a command that wrote something never reads as kept when it was not."""
        if not self.is_shared():
            click.echo(
                f"note: {effect} went to the embedded in-process Redis (no --redis, no "
                f"${ENV_URL}), which is gone now that the command exits: nothing was kept",
                err=True,
            )

    def refuse_evicting(self, cache: Cache) -> None:
        """A long-running process does not start on a Redis that may evict its cache's keys
        (exit 1, naming the policy); when the policy cannot be read it says so and goes on."""
        check = cache.store.eviction()
        if check.evicts:
            raise click.ClickException(check.problem(cache.name))
        if check.policy is None and self.is_shared():
            click.echo(f"note: maxmemory-policy not checked: {check.why}", err=True)

    def refuse_embedded(self, command: str, once: bool = False) -> None:
        """A long-running server on the embedded backend serves a Redis nobody else can
        reach: a usage error unless --embedded asks for exactly that. ``once``: the command
        runs one round (``--once``), on a Redis that holds nothing (found in review: it was
        refused as running "until stopped")."""
        if self.is_shared() or self.embedded:
            return
        if once:
            raise click.UsageError(
                f"{command} --once without --redis (or ${ENV_URL}) would run its round on an "
                "embedded in-process Redis that holds nothing and is gone at exit: give "
                "--redis URL, or --embedded to run on it anyway"
            )
        raise click.UsageError(
            f"{command} runs until stopped, and without --redis (or ${ENV_URL}) it would "
            "serve an embedded in-process Redis that no other process can reach: give "
            "--redis URL, or --embedded to run on it anyway"
        )

    def client(self) -> Client:
        """A client for --redis; a server that does not answer names --timeout (found in
        review: the long-running commands' retry lines named "connect()'s timeout")."""
        try:
            return connect(self.url, timeout=self.timeout)
        except NoAnswer as error:
            error.set_by(TIMEOUT_SETTING)
            raise

    def existing_cache(self, **options: Any) -> Cache:
        """The named cache for a read command: one that holds nothing does not exist (a
        misspelled --cache must not read as an empty cluster)."""
        cache = self.cache(**options)
        if cache.is_empty():
            raise click.ClickException(
                f"cache {cache.name!r} does not exist on {describe(self.url)} (nothing was ever "
                "written to it: is --cache right?)"
            )
        return cache

    def cache(self, client: Client | None = None, **options: Any) -> Cache:
        """The named cache with these settings (``options``: ttl, replica, ...)."""
        retry = replace(DEFAULT_RETRY, within=self.retry_for) if self.retry_for else NO_RETRY
        return Cache(
            client or self.client(),
            options.pop("name", self.cache_name),
            retry=retry,
            wait_replicas=self.wait_replicas,
            wait_timeout=self.wait_timeout,
            read_from=self.read_from,
            **options,
        )
