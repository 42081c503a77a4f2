"""``schedcache extender``: a kube-scheduler extender on the shared cache, until SIGTERM."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import click

from schedcache.cli.kube import kube_api, kube_options, ttl_option
from schedcache.cli.params import Name, Seconds

if TYPE_CHECKING:
    from schedcache.cli.app import Settings

EXTENDER_MISSING = (
    "schedcache extender needs aiohttp and the Kubernetes client: pip install "
    "'schedcache[extender]'"
)


# Newer click types ParamType by what convert() returns; older releases cannot subscript it.
if TYPE_CHECKING:
    AddressParam = click.ParamType[tuple[str, int]]
else:
    AddressParam = click.ParamType


class Listen(AddressParam):
    """``HOST:PORT`` (``:PORT`` listens on every address)."""

    name = "host:port"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int]:
        if isinstance(value, tuple):
            return (str(value[0]), int(value[1]))
        host, _, port = str(value).rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            self.fail(f"{value!r} is not HOST:PORT with a port from 1 to 65535", param, ctx)
        return (host.strip("[]") or "0.0.0.0", int(port))


@click.command("extender")
@click.option(
    "--listen",
    type=Listen(),
    default="127.0.0.1:8888",
    show_default=True,
    help="Address to serve on, HOST:PORT.",
)
@click.option(
    "--url-prefix",
    default="",
    help="Path of the urlPrefix in the KubeSchedulerConfiguration (e.g. /scheduler).",
)
@kube_options
@click.option(
    "--no-api",
    is_flag=True,
    help="Bind only claims in the cache, without a Binding (tests, dry runs).",
)
@click.option(
    "--replica",
    type=Name(),
    default="extender",
    show_default=True,
    help="Name in events and the lease of claims.",
)
@ttl_option
@click.pass_obj
def extender(
    settings: Settings,
    listen: tuple[str, int],
    url_prefix: str,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    no_api: bool,
    replica: str,
    ttl: float,
) -> None:
    """Serve kube-scheduler's extender protocol (filter, prioritize, bind) on the cache, so
    several active kube-scheduler replicas share it: a bind is a fit-checked claim, never an
    overfilled node. Configuration: docs/extender.md."""
    settings.refuse_embedded("schedcache extender")
    try:
        from schedcache.extender.server import serve
        from schedcache.extender.service import Binder, Extender
    except ImportError:
        raise click.ClickException(EXTENDER_MISSING) from None
    binder: Binder | None = None
    if not no_api:
        from schedcache.extender.binder import ApiBinder

        api = kube_api(kubeconfig, context, in_cluster, EXTENDER_MISSING, " (or --no-api)")
        binder = ApiBinder(api)
    cache = settings.cache(replica=replica, ttl=ttl)
    host, port = listen
    click.echo(f"extender for cache {cache.name} on http://{host}:{port}{url_prefix}", err=True)
    serve(Extender(cache, binder), host, port, url_prefix)


@click.command("scheduler")
@click.option(
    "--scheduler-name",
    required=True,
    help="Schedule the pending pods whose spec.schedulerName is this.",
)
@kube_options
@click.option(
    "--replica",
    type=Name(),
    default=None,
    help="Name in events and the claims' lease [default: the scheduler name].",
)
@ttl_option
@click.option(
    "--pod-initial-backoff",
    type=Seconds(open_min=True, maximum=3600.0),
    default=1.0,
    show_default=True,
    help="First wait before an unschedulable pod is tried again (upstream's "
    "podInitialBackoffSeconds), s; doubles per failure.",
)
@click.option(
    "--pod-max-backoff",
    type=Seconds(open_min=True, maximum=3600.0),
    default=10.0,
    show_default=True,
    help="Longest wait before an unschedulable pod is tried again (upstream's "
    "podMaxBackoffSeconds), s. A cluster change that could help retries it at once.",
)
@click.pass_obj
def scheduler(
    settings: Settings,
    scheduler_name: str,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    replica: str | None,
    ttl: float,
    pod_initial_backoff: float,
    pod_max_backoff: float,
) -> None:
    """A reference scheduler replica in Python on the cache: watches pending pods with
    --scheduler-name, filters and scores on its snapshot, claims with check_fit, binds through
    the API server. Run N side by side (and `schedcache sync` to confirm the bindings). Runs
    until SIGTERM or Ctrl-C."""
    if pod_max_backoff < pod_initial_backoff:
        raise click.BadParameter(
            f"{pod_max_backoff:g} is below --pod-initial-backoff {pod_initial_backoff:g}",
            param_hint="--pod-max-backoff",
        )
    api = kube_api(kubeconfig, context, in_cluster, EXTENDER_MISSING)
    try:
        from schedcache.extender.reference import ReferenceScheduler
    except ImportError:
        raise click.ClickException(EXTENDER_MISSING) from None
    cache = settings.cache(replica=replica or _name(scheduler_name), ttl=ttl)
    loop = ReferenceScheduler(
        cache,
        api,
        scheduler_name,
        retry_delay=pod_initial_backoff,
        max_backoff=pod_max_backoff,
    )
    signal.signal(signal.SIGTERM, lambda *_: loop.stop.set())
    signal.signal(signal.SIGINT, lambda *_: loop.stop.set())
    click.echo(f"scheduling pods of {scheduler_name!r} on cache {cache.name}", err=True)
    loop.run()
    click.echo(
        f"stopped; {loop.bound} bound, {loop.conflicts} conflicts, "
        f"{loop.unschedulable} unschedulable attempts",
        err=True,
    )


def _name(scheduler_name: str) -> str:
    """The scheduler name as a replica name (no whitespace or control characters)."""
    cleaned = "".join(c if c.isprintable() and not c.isspace() else "-" for c in scheduler_name)
    return cleaned[:253] or "scheduler"
