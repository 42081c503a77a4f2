"""The README's API example runs as written and shows what it claims."""

from __future__ import annotations

import re
from pathlib import Path

import click

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_api_example_runs_and_matches_its_comments(capsys):
    bound = []
    namespace: dict = {"__name__": "readme", "bound_pods": [], "bind": bound.append}
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "pod default/web-0 (uid 9f1c) is already added on node node-1" in printed
    info = namespace["info"]
    assert (info.requested.milli_cpu, info.non_zero_requested.memory, info.used_ports) == (
        250,
        268435456,
        {("0.0.0.0", "TCP", 8080)},
    )
    cache = namespace["cache"]
    assert [e.type for e in cache.events()][:4] == [
        "NodeAdded",
        "PodAssumed",
        "BindingFinished",
        "PodAdded",
    ]
    # The scheduling cycle placed web-0 again, on the only node, assumed and bound.
    assert [pod.name for pod in bound] == ["web-0"]
    assert cache.is_assumed_pod(bound[0]) and bound[0].node_name == "node-1"
    assert namespace["snap"].generation < cache.generation()


def cli_commands(command: click.Command, path: tuple[str, ...] = ()) -> list:
    """(path, command) of every command of the CLI, groups included."""
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            found += cli_commands(sub, (*path, name))
    return found


def test_readme_documents_every_command_and_option():
    from schedcache.cli.app import main

    text = README.read_text()
    section = text[text.index("## Command line") : text.index("## Configuration")]
    for path, command in cli_commands(main):
        if path and not isinstance(command, click.Group):
            assert re.search(rf"`(schedcache )?{re.escape(' '.join(path))}[` ]", section), path
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                named = any(
                    re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", section)
                    for opt in param.opts
                )
                assert named, f"{' '.join(path) or 'global'} {param.opts} is not documented"
                if param.envvar:
                    assert param.envvar in section, param.envvar


def test_readme_says_how_to_get_redis_next_to_the_test_command():
    text = README.read_text()
    around = text[text.index("python -m pytest -q") :][:800]
    for hint in ("apt-get install redis-server", "brew install redis", "SCHEDCACHE_TEST_REDIS_URL"):
        assert hint in around


def test_the_suite_starts_its_own_redis_unless_one_is_named():
    """A Redis answering on 6379 is someone's (on this machine one often does): the suite
    uses a server only when SCHEDCACHE_TEST_REDIS_URL names it, and otherwise starts its own."""
    from tests.conftest import redis_choice

    assert redis_choice(None).start and redis_choice(None).url is None
    assert redis_choice("redis://127.0.0.1:7777/0").url == "redis://127.0.0.1:7777/0"
