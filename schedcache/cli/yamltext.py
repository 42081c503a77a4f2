"""``-o yaml`` as kubectl writes it: a string that any YAML reader, 1.1 or 1.2, would read back
as something else (a number, a boolean, null, a date) is double-quoted.

PyYAML resolves scalars by YAML 1.1 and so leaves ``00009``, ``0o17`` or ``1e3`` bare, which a
YAML 1.2 reader (kubectl's, Go's yaml.v3, ruamel) reads as the numbers 9, 15 and 1000: a label
``pod-template-hash: "00009"`` would come back as an integer. kubectl (go-yaml) quotes them.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml
from yaml.nodes import ScalarNode

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


class KubectlDumper(yaml.SafeDumper):
    """SafeDumper that double-quotes every string a YAML 1.1 or 1.2 reader would not read back
    as that string."""

    def represent_str(self, data: str) -> ScalarNode:
        node = super().represent_str(data)
        # PyYAML's own (YAML 1.1) reading of the bare string; untyped in its stubs.
        plain_type = self.resolve(ScalarNode, data, (True, False))  # type: ignore[no-untyped-call]
        if not data or plain_type != "tag:yaml.org,2002:str" or _OTHER_TYPES.match(data):
            node.style = '"'
        return node


KubectlDumper.add_representer(str, KubectlDumper.represent_str)


def yaml_text(document: Any) -> str:
    """``document`` as kubectl's ``-o yaml`` prints it (keys in the document's order), without
    the final newline."""
    text: str = yaml.dump(
        document,
        Dumper=KubectlDumper,
        sort_keys=False,
        allow_unicode=False,
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
