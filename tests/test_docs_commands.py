"""Every ``schedcache`` command line quoted in the README and docs/ works as written.

* Command blocks (```sh) run in order, as a reader pastes them, against the test's real Redis
  (each ``--redis`` URL on this machine becomes the test server, each cache name gets a unique
  suffix): exit status 0, and what a comment promises (``sed -n 6p  # the last NodeAdded``)
  holds; the ``whatif --at`` that follows takes the id that line printed, as the reader would.
  Lines that need a Kubernetes API server or name another machine's Redis are parsed (every
  subcommand, option and value is checked as the command would check it) but not run.
* Synopses in the text (``schedcache get pods|nodes [NAME...] [-n NS | -A] ...``) are made
  concrete (each optional part present, the first of each alternative, a sample value for each
  placeholder) and parsed the same way: an option the docs name and the code lacks fails here.
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner

from schedcache.cli.app import main
from tests.conftest import REAL_REDIS_URL

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LOCAL_HOSTS = ("localhost", "127.0.0.1")
NEEDS_AN_API_SERVER = {"sync", "extender", "scheduler"}
# Sample values for the placeholders of the synopses.
SAMPLES = {
    "FILE": "examples/kubectl-cluster.json",
    "PATH": "/scheduler",
    "NAME": "web-0",
    "ID": "1-0",
    "ID_A": "1-0",
    "ID_B": "2-0",
    "N": "1",
    "NS": "default",
    "SELECTOR": "app=web",
    "NODE": "n1",
    "JSONPATH": ".metadata.name",
    "DURATION": "5m",
    "URL": "redis://127.0.0.1:1/0",
    "NAMESPACE/NAME": "default/web-0",
    "MODULE:FUNCTION": "mymodule:policy",
    "SHELL": "bash",
}


def fenced_lines(path: Path) -> Iterator[str]:
    """The schedcache command lines of the ```sh blocks, continuation lines joined."""
    for body in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", path.read_text(), flags=re.S):
        for line in body.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):  # `python3 -m venv .venv && ... && schedcache demo`
                words = part.split()
                if words and Path(words[0]).name == "schedcache":
                    yield part.strip()


def synopses(path: Path) -> Iterator[str]:
    """The `schedcache ...` spans of the running text (not the code blocks)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S).replace("\n", " ")
    yield from re.findall(r"`((?:\.venv/bin/)?schedcache [^`]*)`", text)


def concrete(synopsis: str) -> list[str]:
    """A synopsis as a command line: optional parts present, the first alternative, samples."""
    text = synopsis.replace("\\|", "|").replace("...", " ")
    text = re.sub(r"\[([^\[\]]*)\]", r" \1 ", text)  # every optional part given
    words = []
    for word in text.split():
        word = word.split("|")[0] if "|" in word and not word.startswith("jsonpath") else word
        if word in ("|", ""):
            continue
        words.append(SAMPLES.get(word, word))
    return drop_alternatives(words[1:])


def drop_alternatives(words: list[str]) -> list[str]:
    """``-n NS | -A`` became ``-n default -A``: keep the first of flags the docs separated."""
    return [w for i, w in enumerate(words) if not (w == "-A" and "-n" in words[:i])]


def parse(args: list[str]) -> click.Context:
    """Parse ``args`` as ``schedcache`` would, down to the subcommand, without running it:
    unknown subcommands or options and bad values raise click's usage errors."""
    ctx = main.make_context("schedcache", list(args))
    command: click.Command = main
    rest = [*ctx._protected_args, *ctx.args]
    while isinstance(command, click.Group) and rest:
        name, found, rest = command.resolve_command(ctx, rest)
        assert found is not None and name is not None, args
        if isinstance(found, click.Group) and not rest:
            return ctx  # the docs name a family of commands (`schedcache worker`)
        command = found
        ctx = command.make_context(name, rest, parent=ctx)
        rest = [*ctx._protected_args, *ctx.args] if isinstance(command, click.Group) else []
    return ctx


def needs_elsewhere(args: list[str]) -> bool:
    """Whether the line needs an API server or names a Redis on another machine."""
    urls = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--redis"]
    remote = any(not any(host in url for host in LOCAL_HOSTS) for url in urls)
    return remote or bool(NEEDS_AN_API_SERVER & set(args))


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_the_command_blocks_run_as_written(path: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("SCHEDCACHE_REDIS_URL", raising=False)
    suffix = uuid.uuid4().hex[:8]
    try:
        run_blocks(path, suffix, tmp_path)
    finally:
        client = redis.Redis.from_url(REAL_REDIS_URL)
        for key in client.scan_iter(match=f"*-{suffix}}}*", count=1000):
            client.delete(key)


def run_blocks(path: Path, suffix: str, tmp_path: Path) -> None:
    last_printed = ""
    for line in fenced_lines(path):
        command, _, comment = line.partition("#")
        pipeline = command.split("|")
        args = shlex.split(pipeline[0])[1:]
        parse(args)  # every line is at least a valid command line
        if needs_elsewhere(args):
            continue
        args = local(args, suffix, tmp_path, last_printed)
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (line, result.output)
        output = result.stdout
        for stage in pipeline[1:]:
            output = sed(stage, output)
        if "the last NodeAdded" in comment:
            assert output.split()[1] == "NodeAdded", (line, output)
        last_printed = output


def local(args: list[str], suffix: str, tmp_path: Path, last_printed: str) -> list[str]:
    """``args`` on the test's Redis, with unique cache names, files under ``tmp_path``, and the
    ``--at`` id the previous line printed."""
    out = []
    for i, word in enumerate(args):
        before = args[i - 1] if i else ""
        if before == "--redis":
            word = REAL_REDIS_URL
        elif before == "--cache":
            word = f"{word}-{suffix}"
        elif before == "--at" and last_printed:
            word = last_printed.split()[0]
        elif before == "--html":
            word = str(tmp_path / word)
        out.append(word)
    if "demo" in out and "--cache" not in out:
        out += ["--cache", f"demo-{suffix}"]
    return out


def sed(stage: str, text: str) -> str:
    """The ``sed -n Np`` of a pipeline (the only filter the docs use)."""
    match = re.fullmatch(r"\s*sed -n (\d+)p\s*", stage)
    assert match, f"a pipeline stage the test does not know: {stage!r}"
    lines = text.splitlines()
    index = int(match[1]) - 1
    return lines[index] + "\n" if index < len(lines) else ""


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_the_synopses_name_real_commands_options_and_values(path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    for synopsis in synopses(path):
        args = concrete(synopsis)
        try:
            parse(args)
        except click.MissingParameter:
            if any(word.startswith("-") for word in args):
                raise
            continue  # the text names a command (`schedcache explain pod`), not a whole line
        except click.ClickException as error:
            pytest.fail(f"{path.name}: `{synopsis}` as {args}: {error.format_message()}")


def test_concrete_lines_take_every_optional_part():
    assert concrete("schedcache events [--since ID\\|DURATION] [--count N] [-f]") == [
        "events",
        "--since",
        "1-0",
        "--count",
        "1",
        "-f",
    ]
    assert concrete("schedcache get pods\\|nodes [NAME...] [-n NS \\| -A]") == [
        "get",
        "pods",
        "web-0",
        "-n",
        "default",
    ]
