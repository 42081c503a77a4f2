"""The part of kubectl's JSONPath templates people type: ``-o jsonpath=...``,
``-o custom-columns=...`` and ``--sort-by``.

Supported: text around ``{...}`` blocks; paths of ``.field`` (a backslash escapes the next
character, as kubectl's parser reads ``.topology\\.kubernetes\\.io/zone``),
``['field.with.dots']``, ``[N]`` (negative counts from the end), ``[*]`` and ``.*``;
``{range PATH}...{end}``; string literals (``{"\\n"}``, ``{'\\t'}``). Several results of one
path are joined by a space, as kubectl does. A path that selects nothing prints nothing
(kubectl's default, ``--allow-missing-template-keys=true``), but an index past the end of a list
that is there (``{.items[0]}`` of an empty list), or of a value that is no list, is kubectl's
error, :class:`TemplateFailed`, in ``-o jsonpath``, custom columns and ``--sort-by`` alike:
client-go's ``evalArray`` fails whatever ``AllowMissingKeys`` says. Anything else is a
:class:`JsonPathError` naming the template, never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from schedcache.cli.text import unprintable

# A field name ends where kubectl's parser ends it (a space, ``.``, ``,``, ``[``, ``]``, ``$``,
# ``@``, ``{``, ``}``), except after a backslash; its backslashes are then dropped.
_SEGMENT = re.compile(
    r"\.\*|\.((?:\\.|[^\\\s.,\[\]$@{}])+)|\[\*\]|\[(-?\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]"
)


class JsonPathError(ValueError):
    """A template kubectl's JSONPath would refuse (or one this subset does not cover)."""


class TemplateFailed(JsonPathError):
    """A template that reads but cannot be executed on this object: kubectl's "error executing
    jsonpath" (``-o jsonpath`` only)."""


class IndexOutOfBounds(TemplateFailed):
    """``[N]`` of a list that has no element N: kubectl's jsonpath.go ``evalArray`` error,
    worded as it words it (a negative index is shown with the length added, as there)."""

    def __init__(self, index: int, length: int) -> None:
        super().__init__(f"array index out of bounds: index {index}, length {length}")


# Go's names of the types a decoded object's values have, as kubectl's errors name them.
_GO_TYPES = {
    str: "string",
    dict: "map[string]interface {}",
    list: "[]interface {}",
    bool: "bool",
    int: "int64",
}


def go_type(value: Any) -> str:
    """The Go type of ``value`` in a decoded (unstructured) object, as ``%T`` names it."""
    return _GO_TYPES.get(type(value), "float64")


class NotAList(TemplateFailed):
    """``[N]`` of a value that is no list (a string, an object, a number): evalArray's "is not
    array or slice" (found in review: it printed nothing, status 0). A null is skipped there."""

    def __init__(self, value: Any) -> None:
        super().__init__(f"{go_type(value)} is not array or slice")


@dataclass(frozen=True)
class _Block:
    kind: str  # "text", "path", "range", "end"
    value: str


def _blocks(template: str) -> list[_Block]:
    blocks: list[_Block] = []
    rest = template
    while rest:
        start = rest.find("{")
        if start < 0:
            blocks.append(_Block("text", rest))
            break
        if start:
            blocks.append(_Block("text", rest[:start]))
        end = rest.find("}", start)
        if end < 0:
            raise JsonPathError(f"unclosed {{ in {template!r}")
        inner = rest[start + 1 : end].strip()
        rest = rest[end + 1 :]
        if inner == "end":
            blocks.append(_Block("end", ""))
        elif inner.startswith("range "):
            blocks.append(_Block("range", inner[6:].strip()))
        elif len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "\"'":
            blocks.append(_Block("text", _literal(inner, template)))
        else:
            blocks.append(_Block("path", inner))
    return blocks


def _literal(quoted: str, template: str) -> str:
    try:
        value = json.loads('"' + quoted[1:-1].replace('"', '\\"') + '"')
    except json.JSONDecodeError:
        raise JsonPathError(f"bad string literal {quoted} in {template!r}") from None
    return str(value)


def evaluate(path: str, document: Any, strict: bool = False) -> list[Any]:
    """Every value ``path`` (``.a.b[*].c``, with or without braces) selects in ``document``;
    ``strict``: an index past the end of a list, or of a value that is no list, raises
    :class:`TemplateFailed`, as kubectl's ``-o jsonpath`` does, rather than selecting nothing."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    if text in ("", "@"):
        return [document]
    if text.startswith("@"):
        text = text[1:]
    if not text.startswith((".", "[")):
        text = "." + text
    values = [document]
    position = 0
    while position < len(text):
        match = _SEGMENT.match(text, position)
        if match is None:
            raise JsonPathError(f"cannot parse {path!r} at {text[position:]!r}")
        position = match.end()
        values = [found for value in values for found in _step(value, match, strict)]
    return values


def _step(value: Any, match: re.Match[str], strict: bool) -> list[Any]:
    field = match[1].replace("\\", "") if match[1] else match[3] or match[4]
    if field is not None:
        return [value[field]] if isinstance(value, dict) and field in value else []
    if match[2] is not None:
        index = int(match[2])
        if not isinstance(value, list):
            if strict and value is not None:
                raise NotAList(value)
            return []
        if -len(value) <= index < len(value):
            return [value[index]]
        if strict:
            raise IndexOutOfBounds(index + len(value) if index < 0 else index, len(value))
        return []
    if isinstance(value, dict):  # [*] and .* of an object: its values
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def text_of(value: Any) -> str:
    """A selected value as kubectl's ``-o jsonpath`` prints it: strings bare, the rest as
    Go's ``json.Marshal`` writes them (``{"a":"1","b":"2"}``: compact, keys sorted)."""
    return value if isinstance(value, str) else go_json(value)


# What Go's json.Marshal escapes that json.dumps leaves as it is: HTML's characters.
_GO_JSON_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")


def _json_escaped(match: re.Match[str]) -> str:
    """A character that is not ASCII as it stands, unless :func:`printable` would escape it
    (then a JSON escape, a surrogate pair above U+FFFF)."""
    char = match[0]
    if not unprintable(char):
        return char
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def go_json(value: Any, indent: int | None = None) -> str:
    """``value`` as Go's encoding/json writes a decoded object, compact (``json.Marshal``) or
    indented (``json.MarshalIndent``, kubectl's ``-o json``): keys sorted, ``<``, ``>`` and
    ``&`` escaped (``\\u003c``), other characters written as they are, in UTF-8 (``café``,
    not ``caf\\u00e9``). Go escapes U+2028 and U+2029 too; this also escapes every other
    character :func:`printable` would (C1 controls, bidi overrides and other format
    characters, surrogates, private-use and unassigned code points): the same string to a
    JSON reader, and nothing that rewrites a terminal (kubectl writes those raw)."""
    separators = (",", ":") if indent is None else (",", ": ")
    text = json.dumps(
        value, indent=indent, sort_keys=True, separators=separators, ensure_ascii=False
    )
    if not text.isascii():
        text = _NOT_ASCII.sub(_json_escaped, text)
    return text.translate(_GO_JSON_ESCAPES)


def go_text(value: Any) -> str:
    """A selected value as Go's ``fmt.Sprint`` prints it, as kubectl's custom columns print
    a cell: strings bare, ``true``, ``<nil>``, ``map[a:1 b:2]`` (keys sorted), ``[x y]``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{key}:{go_text(value[key])}" for key in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_text(item) for item in value) + "]"
    return str(value)


def render(template: str, document: Any) -> str:
    """kubectl ``-o jsonpath=TEMPLATE`` of ``document``."""
    blocks = _blocks(template)
    out, position = _render(blocks, 0, document, template)
    if position != len(blocks):
        raise JsonPathError(f"{{end}} without {{range}} in {template!r}")
    return out


def _render(blocks: list[_Block], start: int, document: Any, template: str) -> tuple[str, int]:
    parts: list[str] = []
    index = start
    while index < len(blocks):
        block = blocks[index]
        if block.kind == "end":
            return "".join(parts), index
        if block.kind == "text":
            parts.append(block.value)
        elif block.kind == "path":
            found = evaluate(block.value, document, strict=True)
            parts.append(" ".join(text_of(v) for v in found))
        else:
            items = evaluate(block.value, document, strict=True)
            body_end = _matching_end(blocks, index + 1, template)
            for item in items:
                parts.append(_render(blocks, index + 1, item, template)[0])
            index = body_end
        index += 1
    if start:
        raise JsonPathError(f"{{range}} without {{end}} in {template!r}")
    return "".join(parts), index


def _matching_end(blocks: list[_Block], start: int, template: str) -> int:
    depth = 0
    for index in range(start, len(blocks)):
        if blocks[index].kind == "range":
            depth += 1
        elif blocks[index].kind == "end":
            if depth == 0:
                return index
            depth -= 1
    raise JsonPathError(f"{{range}} without {{end}} in {template!r}")


def custom_columns(spec: str) -> list[tuple[str, str]]:
    """``NAME:.metadata.name,NODE:.spec.nodeName`` as (header, path) pairs."""
    columns = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header or not path:
            raise JsonPathError(
                f"custom-columns {spec!r}: each column is HEADER:JSONPATH "
                "(e.g. NAME:.metadata.name)"
            )
        evaluate(path, {})  # refuse a bad path before anything prints
        columns.append((header, path))
    return columns


def column_value(path: str, document: Any) -> str:
    """A custom column's cell: its values as Go's ``fmt.Sprint`` prints them, joined by
    ``,``; ``<none>`` when the path selects nothing, as kubectl (customcolumn.go); an index
    past the end of a list, or of a value that is no list, raises :class:`TemplateFailed`, as
    kubectl's custom-columns printer fails on it (``error: array index out of bounds: index 5,
    length 1``, exit status 1)."""
    values = evaluate(path, document, strict=True)
    return ",".join(go_text(v) for v in values) if values else "<none>"
