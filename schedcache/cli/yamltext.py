"""``-o yaml`` as kubectl writes it: a string that any YAML reader, 1.1 or 1.2, would read back
as something else (a number, a boolean, null, a date) is double-quoted.

PyYAML resolves scalars by YAML 1.1 and so leaves ``00009``, ``0o17`` or ``1e3`` bare, which a
YAML 1.2 reader (kubectl's, Go's yaml.v3, ruamel) reads as the numbers 9, 15 and 1000: a label
``pod-template-hash: "00009"`` would come back as an integer. kubectl (go-yaml) quotes them.

Text is written in UTF-8 as go-yaml v2 writes it (its emitter is set to unicode): what its
``is_printable`` takes (``\\n``, U+0020..U+007E, U+00A0..U+D7FF, U+E000..U+FFFD but the BOM)
as it is (``café``, ``日本``), and a string holding anything else double-quoted with YAML's
escapes: ``"\\U0001F600"`` (every character above U+FFFF), ``"a\\tb"``, ``"\\uFEFF"``, as
PyYAML's emitter with ``allow_unicode`` writes them. The one difference, deliberate (as in
``-o json``): the characters :func:`schedcache.cli.text.printable` never prints raw (C1
controls, format characters such as a bidi override U+202E or a zero-width joiner,
private-use and unassigned code points, U+2028 and U+2029) are escapes in a double-quoted
string too (``"a\\u202Eb"``), where kubectl writes most of them raw (U+2028 in single quotes)
and fails on others (``error: yaml: control characters are not allowed``: U+0080 to U+009F
but U+0085, which it turns into a space, DEL, U+FFFE, U+FFFF). A YAML reader reads back the
same string; nothing rewrites a terminal. (Where kubectl still differs, not mended here: it
writes a string with a line break as a ``|-`` block, and folds a long double-quoted one
differently.)
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml
from yaml.nodes import ScalarNode

from schedcache.cli.text import unprintable

# The YAML 1.2 core schema's non-string scalars (https://yaml.org/spec/1.2.2/#1032-tag-resolution),
# and YAML 1.1's that PyYAML's resolver leaves out (y/n booleans, go-yaml reads them so).
_OTHER_TYPES = re.compile(
    r"""(?x)
    (?: null | Null | NULL | ~
      | true | True | TRUE | false | False | FALSE
      | y | Y | n | N
      | [-+]? [0-9]+
      | 0o [0-7]+
      | 0x [0-9a-fA-F]+
      | [-+]? (?: \.[0-9]+ | [0-9]+ (?: \.[0-9]* )? ) (?: [eE] [-+]? [0-9]+ )?
      | [-+]? \. (?: inf | Inf | INF )
      | \. (?: nan | NaN | NAN )
    )\Z"""
)


def _escaped(char: str) -> bool:
    """Whether a double-quoted string writes ``char`` as an escape: what go-yaml v2 escapes
    (and PyYAML's emitter with ``allow_unicode``), and what :func:`printable` escapes."""
    return (
        char in '"\\\x85\u2028\u2029\ufeff'
        or not (
            "\x20" <= char <= "\x7e" or "\xa0" <= char <= "\ud7ff" or "\ue000" <= char <= "\ufffd"
        )
        or unprintable(char)
    )


def _double_quoted(data: str) -> bool:
    """Whether ``data`` holds a character no other style writes as kubectl's ``-o yaml`` would
    (go-yaml v2 quotes a string with one its ``is_printable`` refuses: everything above U+FFFF)
    or as :func:`printable` lets through (``\\n`` aside: a line break, kubectl's ``|-``)."""
    if data.isascii() and data.isprintable():  # the common case, in C
        return False
    return any(char not in '\n"\\' and _escaped(char) for char in data)


class KubectlDumper(yaml.SafeDumper):
    """SafeDumper that double-quotes every string a YAML 1.1 or 1.2 reader would not read back
    as that string, and every string go-yaml v2 would double-quote for its characters."""

    def represent_str(self, data: str) -> ScalarNode:
        node = super().represent_str(data)
        # PyYAML's own (YAML 1.1) reading of the bare string; untyped in its stubs.
        plain_type = self.resolve(ScalarNode, data, (True, False))  # type: ignore[no-untyped-call]
        if (
            not data
            or plain_type != "tag:yaml.org,2002:str"
            or _OTHER_TYPES.match(data)
            or _double_quoted(data)
        ):
            node.style = '"'
        return node

    def write_double_quoted(self, text: str, split: bool = True) -> None:
        """PyYAML 6's ``Emitter.write_double_quoted`` (line folding and escapes as go-yaml's),
        with :func:`_escaped` deciding which characters are escapes."""
        self.write_indicator('"', True)
        start = end = 0
        while end <= len(text):
            ch = text[end] if end < len(text) else None
            if ch is None or _escaped(ch):
                if start < end:
                    self._put(text[start:end])
                    start = end
                if ch is not None:
                    if ch in self.ESCAPE_REPLACEMENTS:
                        self._put("\\" + self.ESCAPE_REPLACEMENTS[ch])
                    elif ch <= "\xff":
                        self._put(f"\\x{ord(ch):02X}")
                    elif ch <= "\uffff":
                        self._put(f"\\u{ord(ch):04X}")
                    else:
                        self._put(f"\\U{ord(ch):08X}")
                    start = end + 1
            if (
                0 < end < len(text) - 1
                and (ch == " " or start >= end)
                and self.column + (end - start) > self.best_width
                and split
            ):
                data = text[start:end] + "\\"
                if start < end:
                    start = end
                self._put(data)
                self.write_indent()
                self.whitespace = False
                self.indention = False
                if text[start] == " ":
                    self._put("\\")
            end += 1
        self.write_indicator('"', False)

    def _put(self, data: str) -> None:
        self.column += len(data)
        self.stream.write(data.encode(self.encoding) if self.encoding else data)


KubectlDumper.add_representer(str, KubectlDumper.represent_str)


def yaml_text(document: Any) -> str:
    """``document`` as kubectl's ``-o yaml`` prints it (keys in the document's order, text in
    UTF-8 as the module says), without the final newline."""
    text: str = yaml.dump(
        document,
        Dumper=KubectlDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
    )
    return text.rstrip("\n")


def go_yaml_ordered(value: Any) -> Any:
    """``value`` with every mapping's keys in the order kubectl's ``-o yaml`` writes them.

    ``kubectl get`` prints unstructured objects (maps); sigs.k8s.io/yaml marshals them as
    JSON, reads that back into Go maps and has its go-yaml v2 fork write them, which sorts a
    map's keys with its ``keyList.Less`` (sorter.go): not byte order, but runs of digits by
    value (``app2`` before ``app10``) and, at the first difference, a non-letter before a
    letter (``a_`` before ``aZ``)."""
    if isinstance(value, dict):
        keys = sorted(value, key=functools.cmp_to_key(_yaml_key_compare))
        return {key: go_yaml_ordered(value[key]) for key in keys}
    if isinstance(value, list):
        return [go_yaml_ordered(item) for item in value]
    return value


def _yaml_key_compare(a: str, b: str) -> int:
    return -1 if _yaml_key_less(a, b) else int(_yaml_key_less(b, a))


def _yaml_key_less(a: str, b: str) -> bool:
    """go-yaml v2's ``keyList.Less`` of two string keys, rune by rune (Go's ``IsLetter`` is
    :meth:`str.isalpha`, its ``IsDigit`` :meth:`str.isdecimal`)."""
    for at, (x, y) in enumerate(zip(a, b, strict=False)):
        if x == y:
            continue
        if x.isalpha() and y.isalpha():
            return x < y
        if x.isalpha() or y.isalpha():
            return y.isalpha()  # the non-letter first
        return _digits_less(a, b, at)
    return len(a) < len(b)


def _digits_less(a: str, b: str, at: int) -> bool:
    """Two keys that first differ at ``at`` in two non-letters: the runs of digits from there
    by value (a non-digit counts as an empty run, 0), then the shorter run, then the rune;
    go-yaml counts on from 1, not 0, when one of them is a 0 after nonzero digits."""
    start = 0
    if "0" in (a[at], b[at]) and _nonzero_digit_before(a, at):
        start = 1
    a_value, a_end = _digit_run(a, at, start)
    b_value, b_end = _digit_run(b, at, start)
    if a_value != b_value:
        return a_value < b_value
    if a_end != b_end:
        return a_end < b_end
    return a[at] < b[at]


def _nonzero_digit_before(text: str, at: int) -> bool:
    """Whether the run of digits that ends just before ``at`` holds a digit other than 0."""
    for char in reversed(text[:at]):
        if not char.isdecimal():
            return False
        if char != "0":
            return True
    return False


def _digit_run(text: str, at: int, value: int) -> tuple[int, int]:
    """The number the digits from ``at`` make, counting on from ``value``, and where they end."""
    end = at
    while end < len(text) and text[end].isdecimal():
        value = value * 10 + ord(text[end]) - ord("0")
        end += 1
    return value, end
