"""kubectl's output formats for lists of objects: the table, ``-o wide|json|yaml|name|
jsonpath=...|custom-columns=...``, ``--no-headers`` and ``--sort-by``, on the v1-shaped dicts
of :mod:`schedcache.cli.objects`."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NoReturn, TypeVar

import click

from schedcache.cli.jsonpath import (
    JsonPathError,
    TemplateFailed,
    column_value,
    custom_columns,
    evaluate,
    go_json,
    go_type,
    render,
)
from schedcache.cli.text import go_quoted, printable
from schedcache.errors import ValidationError
from schedcache.model.quantity import parse_quantity

F = TypeVar("F", bound=Callable[..., Any])
FORMATS = "wide, json, yaml, name, jsonpath=TEMPLATE, custom-columns=SPEC"


@dataclass(frozen=True)
class Output:
    """A parsed ``-o``: ``kind`` is table, wide, json, yaml, name, jsonpath or custom-columns."""

    kind: str
    argument: str = ""

    @property
    def is_table(self) -> bool:
        return self.kind in ("table", "wide")


def parse_output(
    value: str | None, ctx: click.Context | None = None, param: click.Parameter | None = None
) -> Output:
    """``-o`` as kubectl takes it; anything else is a usage error naming the formats."""
    if value is None or value == "":
        return Output("table")
    kind, sep, argument = value.partition("=")
    if kind in ("wide", "json", "yaml", "name") and not sep:
        return Output(kind)
    if kind in ("jsonpath", "custom-columns") and sep and argument:
        try:
            if kind == "jsonpath":
                render(argument, {})
            else:
                custom_columns(argument)
        except JsonPathError as error:
            raise click.BadParameter(printable(error), ctx, param) from None
        return Output(kind, argument)
    raise click.BadParameter(
        f"unable to match a printer suitable for the output format {printable(value)!r}, "
        f"allowed formats are: {FORMATS}",
        ctx,
        param,
    )


def jsonpath_failed(template: str, error: JsonPathError) -> NoReturn:
    """kubectl's error for a template that fails on the objects (``{.items[0]}`` of an empty
    list), on stderr, exit status 1, nothing on stdout: its first lines as kubectl's printer
    (cli-runtime's printers/jsonpath.go) words them; the object dump kubectl adds after them,
    in Go's syntax, is left out."""
    quoted = printable(json.dumps(template, ensure_ascii=False))
    click.echo(
        f"error: error executing jsonpath {quoted}: Error executing template: {error}. "
        "Printing more information for debugging the template:\n"
        f"\ttemplate was:\n\t\t{printable(template)}",
        err=True,
    )
    sys.exit(1)


def output_option(command: F) -> F:
    """``-o/--output`` (a table when not given)."""
    return click.option(
        "-o",
        "--output",
        default=None,
        metavar="FORMAT",
        callback=lambda ctx, param, value: parse_output(value, ctx, param),
        help=f"Output format: {FORMATS} (default: a table).",
    )(command)


# kubectl get's tabwriter (cli-runtime printers.GetNewTabWriter: minwidth 6, padding 3): a
# column, its three spaces included, is never narrower than 6.
GET_MIN_WIDTH = 3


def table_text(
    headers: Sequence[str], rows: Sequence[Sequence[str]], no_headers: bool, min_width: int = 0
) -> str:
    """kubectl's table: left-aligned columns three spaces apart, each at least ``min_width``
    wide before them (:data:`GET_MIN_WIDTH` for get's), no trailing blanks."""
    shown = [list(map(printable, row)) for row in rows]
    if not no_headers:
        shown.insert(0, list(headers))
    if not shown:
        return ""
    widths = [max(min_width, *(len(row[i]) for row in shown)) for i in range(len(headers))]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in shown
    ]
    return "\n".join(lines)


def sort_by(documents: list[dict[str, Any]], path: str | None, table: bool = False) -> list[int]:
    """The order ``--sort-by PATH`` gives ``documents`` (indexes; stable; missing values
    first, then nulls, then the values, as kubectl); a bad path is a usage error, and an index
    past the end of a list (or of a value that is no list) in any document is an error, exit
    status 1, before anything is printed (kubectl's sorter: ``error: array index out of bounds:
    index 3, length 1``), as is a path that selects nothing in every document (``couldn't find
    any field with path``: sorter.go's check that the field is valid for one object at least).

    Strings compare as kubectl's sorter compares them: two quantities (``50m``, ``1020m``,
    ``2``, ``1Gi``) by value, anything else in natural order (``web-2`` before ``web-10``);
    numbers by value. What kubectl's ``isLess`` cannot compare (a map, a list, a boolean, or
    values of two types: a string and a number, an integer and a float) is its error, exit
    status 1, nothing printed (``table``: worded as its table sorter words it)."""
    if not path:
        return list(range(len(documents)))
    try:
        evaluate(path, {})  # the whole path parses, as kubectl parses it before it sorts
    except JsonPathError as error:
        raise click.BadParameter(printable(error), param_hint="--sort-by") from None
    keys = [_sort_key(path, document) for document in documents]
    if documents and not any(keys):  # kubectl's SortObjects: the path must find something
        raise click.ClickException(
            printable(
                f"couldn't find any field with path {go_quoted(relaxed_path(path))} in "
                "the list of objects"
            )
        )
    _check_sortable([found[0] for found in keys if found], path, table)
    values = [_sort_value(found[0]) if found else None for found in keys]

    def compare(i: int, j: int) -> int:
        return _compare(values[i], values[j])

    return sorted(range(len(documents)), key=functools.cmp_to_key(compare))


_RELAXED = re.compile(r"\{\.?([^{}]+)\}|\.?([^{}]+)")


def relaxed_path(path: str) -> str:
    """``path`` as kubectl's ``RelaxedJSONPathExpression`` writes it in its sorter's errors:
    ``.a.b``, ``a.b`` and ``{a.b}`` are ``{.a.b}`` (as it is when that does not apply)."""
    match = _RELAXED.fullmatch(path)
    return "{." + (match[1] or match[2]) + "}" if match else path


# The Go types kubectl's isLess compares, as a decoded object holds them.
_SORTABLE = {str: "string", int: "int64", float: "float64"}


def _check_sortable(present: list[Any], path: str, table: bool) -> None:
    """kubectl's sorter's failure on the values ``path`` selects (``present``: one a
    document that has one, in the listing's order), if it fails: its ``isLess`` compares two
    values, neither null, of one type among string, int64 and float64; anything else ends
    kubectl with ``Field {.PATH} in *unstructured.Unstructured is an unsortable type:
    interface, err: unsortable type: map[string]interface {}`` (or ``[]interface {}``,
    ``bool``; ``unsortable interface: interface`` for two types), exit status 1 (klog.Exitf).

    Which two values it compares first is its sort's choice; this takes the first pair Go's
    insertion sort (sort.Sort of up to 12 objects) compares that fails: each value with one
    before it. One value (or none) is never compared: nothing fails."""
    values = [value for value in present if value is not None]  # a null is less, no error
    if len(values) < 2:
        return
    first, reason = _SORTABLE.get(type(values[0])), ""
    for value in values[1:]:
        kind = _SORTABLE.get(type(value))
        if kind is None:
            reason = f"unsortable type: {go_type(value)}"
        elif kind != first:
            reason = "unsortable interface: interface"
        else:
            continue
        break
    if reason:
        where = "[][][]reflect.Value" if table else "*unstructured.Unstructured"
        raise click.ClickException(
            printable(
                f"Field {relaxed_path(path)} in {where} is an unsortable type: interface, "
                f"err: {reason}"
            )
        )


def _sort_key(path: str, document: dict[str, Any]) -> list[Any]:
    """What ``--sort-by`` ``path`` selects in ``document``; kubectl's failure of an index past
    the end of a list as an error naming the path and the object."""
    try:
        return evaluate(path, document, strict=True)
    except TemplateFailed as error:
        raise click.ClickException(
            printable(f"--sort-by {path!r} of {object_name(document)}: {error}")
        ) from None


def object_name(document: dict[str, Any]) -> str:
    """``pod default/web-0``, ``node n1``: which object an error is about."""
    kind = str(document.get("kind", "object")).lower()
    metadata = document.get("metadata") or {}
    name, namespace = metadata.get("name", ""), metadata.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


_SortValue = tuple[int, float, str, Fraction | None] | None
_DIGITS = re.compile(r"(\d+)")


def _sort_value(value: Any) -> _SortValue:
    """What the sort compares of one selected value (one :func:`_check_sortable` passed): its
    group (null 0, numbers 1, strings 2), the number, the text, and the quantity the text
    denotes (None when it is not one)."""
    if value is None:  # kubectl's isLess: a nil is less than any value
        return (0, 0.0, "", None)
    if isinstance(value, int | float):
        return (1, float(value), "", None)
    text = str(value)
    try:
        quantity: Fraction | None = parse_quantity(text, obj="--sort-by", field=text)
    except ValidationError:
        quantity = None
    return (2, 0.0, text, quantity)


def _compare(a: _SortValue, b: _SortValue) -> int:
    if a is None or b is None:
        return (a is not None) - (b is not None)  # missing values first
    if a[0] != b[0] or a[0] != 2:
        return _sign(a[:2], b[:2])
    if a[3] is not None and b[3] is not None:
        return _sign(a[3], b[3])
    return natural_compare(a[2], b[2])


def natural_compare(a: str, b: str) -> int:
    """Natural order (``sortorder.NaturalLess``, kubectl's): runs of digits compare as numbers
    (fewer leading zeros first on a tie), the text between them as text."""
    for x, y in zip(_DIGITS.split(a), _DIGITS.split(b), strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return _sign((int(x), len(x)), (int(y), len(y)))
        return _sign(x, y)
    return _sign(len(_DIGITS.split(a)), len(_DIGITS.split(b)))


def _sign(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def print_objects(
    output: Output,
    documents: list[dict[str, Any]],
    single: bool,
    kind: str,
    no_headers: bool,
    headers: Sequence[str] = (),
    rows: Sequence[Sequence[str]] = (),
) -> None:
    """``documents`` in ``output``'s format (tables from ``headers`` and ``rows``); a single
    named object prints as itself, several as a v1 List. ``-o json|yaml`` write every
    mapping's keys sorted, as kubectl: ``kubectl get`` prints unstructured objects (Go maps),
    never typed structs, so no field keeps its struct order (``metadata.creationTimestamp``
    before ``name``; ``app2`` before ``app10`` in YAML, after it in JSON)."""
    from schedcache.cli.objects import as_list

    document: Any = documents[0] if single and len(documents) == 1 else as_list(documents)
    if output.is_table:
        text = table_text(headers, rows, no_headers, GET_MIN_WIDTH)
    elif output.kind == "json":
        text = go_json(document, indent=4)
    elif output.kind == "yaml":
        from schedcache.cli.yamltext import go_yaml_ordered, yaml_text  # PyYAML: start-up time

        text = yaml_text(go_yaml_ordered(document))
    elif output.kind == "name":
        text = "\n".join(printable(f"{kind}/{d['metadata']['name']}") for d in documents)
    elif output.kind == "jsonpath":
        try:
            rendered = render(output.argument, document)
        except TemplateFailed as error:
            jsonpath_failed(output.argument, error)
        lines = ("\t".join(map(printable, line.split("\t"))) for line in rendered.split("\n"))
        click.echo("\n".join(lines), nl=False)
        return
    else:
        text = custom_columns_text(output.argument, documents, no_headers)
    if text:
        click.echo(text)


def custom_columns_text(spec: str, documents: list[dict[str, Any]], no_headers: bool) -> str:
    """``-o custom-columns=SPEC`` of ``documents``. A cell kubectl's jsonpath fails on (an
    index past the end of a list) fails as kubectl's printer fails: the rows before it are
    printed, then the error, exit status 1 (customcolumn.go returns FindResults' error, its
    tabwriter flushing what it holds)."""
    columns = custom_columns(spec)
    headers = [header for header, _ in columns]
    rows: list[list[str]] = []
    for document in documents:
        try:
            rows.append(_cells(columns, document))
        except click.ClickException:
            printed = table_text(headers, rows, no_headers, GET_MIN_WIDTH)
            if printed:
                click.echo(printed)
            raise
    return table_text(headers, rows, no_headers, GET_MIN_WIDTH)


def _cells(columns: list[tuple[str, str]], document: dict[str, Any]) -> list[str]:
    """One row of custom columns; a cell kubectl fails on is an error naming its column."""
    cells = []
    for header, path in columns:
        try:
            cells.append(column_value(path, document))
        except TemplateFailed as error:
            column = f"{header}:{path}"
            raise click.ClickException(
                printable(f"custom column {column!r} of {object_name(document)}: {error}")
            ) from None
    return cells
