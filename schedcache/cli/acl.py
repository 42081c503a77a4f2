"""``schedcache acl CACHE --role ROLE``: the ACL rules a role needs, derived from the code."""

from __future__ import annotations

import click

from schedcache.cli.params import check_cache_name
from schedcache.ops.acl import ROLES, acl_rules


@click.command()
@click.argument("cache_name", metavar="CACHE", callback=check_cache_name)
@click.option("--role", type=click.Choice(ROLES), required=True, help="Who logs in as the user.")
@click.option(
    "--cluster",
    is_flag=True,
    help="Add what redis-py's Redis Cluster client asks when it connects (CLUSTER SLOTS, COMMAND).",
)
@click.option(
    "--replica-reads",
    is_flag=True,
    help="Add ROLE and READONLY, for snapshots read from a replica (--read-from replica).",
)
def acl(cache_name: str, role: str, cluster: bool, replica_reads: bool) -> None:
    """Print the rules `ACL SETUSER USER` takes, after the user's name, for ROLE on CACHE.

    Derived from what the code calls: every command of the library's Lua functions (for each
    role that may FCALL) and the plain commands the Python side sends in the parts that role
    runs. The password is left to you: append `>PASSWORD` (docs/security.md). Connects to
    nothing."""
    click.echo(acl_rules(cache_name, role, cluster=cluster, replica_reads=replica_reads))
