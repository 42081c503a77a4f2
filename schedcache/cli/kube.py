"""What the commands that talk to an API server share: its options, and the client."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from schedcache.cli.params import F, Seconds
from schedcache.cli.text import one_line

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api


def kube_options(command: F) -> F:
    """``--kubeconfig``, ``--context``, ``--in-cluster``."""
    for option in reversed(
        [
            click.option(
                "--kubeconfig",
                type=click.Path(dir_okay=False),
                default=None,
                help="kubeconfig file [default: KUBECONFIG, else ~/.kube/config].",
            ),
            click.option(
                "--context", default=None, help="kubeconfig context [default: the current one]."
            ),
            click.option(
                "--in-cluster",
                is_flag=True,
                help="Use the pod's service account instead of a kubeconfig.",
            ),
        ]
    ):
        command = option(command)
    return command


def ttl_option(command: F) -> F:
    """``--ttl``: how long a bound pod may wait for the informer (the cache's ttl)."""
    return click.option(
        "--ttl",
        type=Seconds(maximum=86_400.0),
        default=30.0,
        show_default=True,
        help="Seconds a bound pod may wait for the informer's confirmation.",
    )(command)


def kube_api(
    kubeconfig: str | None, context: str | None, in_cluster: bool, missing: str, hint: str = ""
) -> CoreV1Api:
    """The API client, or one ``Error:`` line: ``missing`` when the client library is not
    installed, else what is wrong with the configuration (plus ``hint``)."""
    try:
        from schedcache.feed.sync import api_client
    except ImportError:
        raise click.ClickException(missing) from None
    try:
        return api_client(kubeconfig, context, in_cluster)
    except Exception as error:  # kubernetes' ConfigException, or a file of the wrong shape
        if in_cluster:
            source = "the in-cluster service account"
        else:
            source = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        detail = one_line(error)
        if type(error).__name__ != "ConfigException":  # the library tripped on the content
            detail = f"not a valid kubeconfig ({type(error).__name__}: {detail})"
        elif not in_cluster and not any(
            os.path.exists(os.path.expanduser(part)) for part in source.split(os.pathsep)
        ):  # ($KUBECONFIG may list several; found in review: "Invalid kube-config file")
            detail = "no such file" if os.pathsep not in source else "none of these files exists"
        message = f"cannot configure the Kubernetes client from {source}: {detail}{hint}"
        raise click.ClickException(message) from None
