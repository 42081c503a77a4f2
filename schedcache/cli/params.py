"""Argument types of the command line: each refuses a bad value as a usage error (exit 2)
naming the option, before anything connects to Redis."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import click
from click.core import ParameterSource

from schedcache.cli.text import printable
from schedcache.errors import ValidationError
from schedcache.model.selectors import is_dns_subdomain
from schedcache.store.commands import MAX_TIMEOUT
from schedcache.store.connection import url_problem
from schedcache.store.events import normal_stream_id
from schedcache.store.keys import Keys

# Newer click types ParamType by what convert() returns; older releases cannot subscript it.
if TYPE_CHECKING:
    TextParam = click.ParamType[str]
    NumberParam = click.ParamType[float]
else:
    TextParam = NumberParam = click.ParamType


class StreamId(TextParam):
    """An event id as ``schedcache events`` prints it (``<ms>-<seq>``; ``<ms>`` = ``<ms>-0``)."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        normal = normal_stream_id(str(value))
        if normal is not None:
            return normal
        self.fail(
            f"'{printable(value)}' is not an event id (<milliseconds>-<sequence>, as "
            "`schedcache events` prints them)",
            param,
            ctx,
        )


class Name(TextParam):
    """A name from the command line: not empty, and text (bytes that are not UTF-8 arrive as
    lone surrogates, which no key can hold). Control characters are allowed: a manifest may
    have put them in a name, and the user must be able to ask about it."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text:
            self.fail("must not be empty", param, ctx)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(f"'{printable(text)}' is not valid UTF-8", param, ctx)
        return text


class SchedulerName(TextParam):
    """A ``spec.schedulerName``: a DNS subdomain, as the API server checks it (it goes into
    queue key names and the pending pods' field selector, where a comma would add a term)."""

    name = "scheduler name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not is_dns_subdomain(text):
            self.fail(
                f"'{printable(text)}' is not a scheduler name (a lowercase DNS subdomain of at "
                "most 253 characters)",
                param,
                ctx,
            )
        return text


# A number as the command line writes one: ASCII digits, a point, an exponent; not Python's
# other spellings, which ``float()`` also takes (``1_0`` is 10, `` 5 `` is 5, ``nan``, ``inf``,
# other scripts' digits: ``٥`` is 5).
DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


class Seconds(NumberParam):
    """A finite number of seconds within bounds, written as a plain decimal (``nan``, ``inf``,
    negatives, ``1_0`` and blanks refused)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, maximum: float = MAX_TIMEOUT, open_min: bool = False):
        self.minimum, self.maximum, self.open_min = minimum, maximum, open_min

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, str) and not DECIMAL.fullmatch(value):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return self.within_bounds(seconds, value, param, ctx)

    def within_bounds(
        self, seconds: float, typed: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """``seconds`` if within bounds, else a usage error quoting the value as ``typed``."""
        low_ok = seconds > self.minimum if self.open_min else seconds >= self.minimum
        if not math.isfinite(seconds) or not low_ok or seconds > self.maximum:
            # (.15g: 315360000, not :g's 3.1536e+08; found in review)
            low = f"{'more than' if self.open_min else 'at least'} {self.minimum:.15g}"
            self.fail(
                f"{typed!r}: must be {low} and at most {self.maximum:.15g} seconds", param, ctx
            )
        return seconds


class Duration(Seconds):
    """Seconds, or a number with a unit as kubectl takes them: ``90s``, ``30m``, ``1h``, ``2d``."""

    name = "duration"
    UNITS: ClassVar[dict[str, float]] = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        text = str(value).strip()
        factor = self.UNITS.get(text[-1:].lower()) if text else None
        if factor is not None:
            if not DECIMAL.fullmatch(text[:-1]):
                self.fail(f"{value!r} is not a duration (e.g. 90s, 30m, 1h)", param, ctx)
            return self.within_bounds(float(text[:-1]) * factor, value, param, ctx)
        if not DECIMAL.fullmatch(text):  # (found in review: "is not a number of seconds")
            self.fail(f"{value!r} is not a duration (e.g. 90s, 30m, 1h)", param, ctx)
        return super().convert(text, param, ctx)


class Count(click.IntRange):
    """A whole number of ``noun`` within bounds, written in ASCII digits; a wrong value says
    what is wanted (click says "'abc' is not a valid integer range", "x>=1")."""

    def __init__(self, noun: str, min: int | None = None, max: int | None = None) -> None:
        super().__init__(min=min, max=max)
        self.noun = noun

    def bounds(self) -> str:
        """The bounds in words, for the message (click writes them x>=1)."""
        if self.min is not None and self.max is not None:
            return f"from {self.min} to {self.max}"
        if self.min is not None:
            return f"at least {self.min}"
        return f"at most {self.max}" if self.max is not None else "any"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) or INTEGER.fullmatch(str(value)):
            try:
                return int(super().convert(value, param, ctx))
            except click.BadParameter:
                pass  # out of bounds: said below
        self.fail(
            f"'{printable(value)}' is not a whole number of {self.noun} ({self.bounds()})",
            param,
            ctx,
        )


INTEGER = re.compile(r"[+-]?\d+", re.ASCII)  # (not int()'s "1_0", " 5 " or other scripts' digits)


def check_cache_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A --cache (or CACHE argument) that makes a valid key prefix, else a usage error."""
    try:
        Keys(value)
    except ValidationError as error:
        raise click.BadParameter(printable(error.reason), ctx, param) from None
    return value


def check_cache_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """The global --cache: checked as check_cache_name, except a value that came from
    $SCHEDCACHE_CACHE, which waits for the group's own callback (:func:`check_cache_variable`):
    `demo` ignores the variable, so a bad one must not refuse it."""
    if param.name and ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT:
        return value
    return check_cache_name(ctx, param, value)


# The commands that never read $SCHEDCACHE_CACHE.
NO_CACHE_COMMANDS = frozenset({"demo", "completion"})
# ctx.meta's key: the command line asks for a command's help (which reads no cache).
HELP_ASKED = "schedcache.help_asked"


def check_cache_variable(ctx: click.Context, value: str) -> None:
    """$SCHEDCACHE_CACHE, once the subcommand is known: refused as a bad --cache (the variable
    named) for every command that uses it, that is all but `demo` (which ignores it) and
    `completion` (which prints a script), and not for a command's --help (found in review)."""
    source = ctx.get_parameter_source("cache_name")
    if source is not ParameterSource.ENVIRONMENT or ctx.invoked_subcommand in NO_CACHE_COMMANDS:
        return
    if ctx.meta.get(HELP_ASKED):
        return
    param = next(p for p in ctx.command.params if p.name == "cache_name")
    check_cache_name(ctx, param, value)


def check_redis_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A --redis URL written wrong (scheme, port, ...) is a usage error, found before anything
    connects; a well-formed one whose server does not answer fails later (exit 1)."""
    problem = url_problem(value) if value else None
    if problem is not None:
        raise click.BadParameter(printable(problem), ctx, param)
    return value


F = TypeVar("F", bound=Callable[..., Any])


def text_or_json_option(help: str) -> Callable[[F], F]:
    """``-o/--output text|json`` (text by default), ``help`` saying what each gives."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help=help,
    )
