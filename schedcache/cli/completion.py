"""``schedcache completion bash|zsh|fish``: the shell completion script, as ``kubectl
completion`` prints one (``source <(schedcache completion bash)``). Click writes the script; it
asks the program itself for the candidates through ``_SCHEDCACHE_COMPLETE``."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL: `source <(schedcache completion bash)` in
    ~/.bashrc, `schedcache completion zsh > "${fpath[1]}/_schedcache"`, or
    `schedcache completion fish > ~/.config/fish/completions/schedcache.fish`."""
    root = ctx.find_root()
    program = "schedcache"  # the console script the shell runs (also under kubectl's plugin)
    maker = get_completion_class(shell)
    if maker is None:  # pragma: no cover  # click registers all three
        raise click.ClickException(f"no completion for {shell}")
    click.echo(maker(root.command, {}, program, "_SCHEDCACHE_COMPLETE").source())
