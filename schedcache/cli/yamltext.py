"""``-o yaml`` as kubectl writes it: a string that any YAML reader, 1.1 or 1.2, would read back
as something else (a number, a boolean, null, a date) is double-quoted.

PyYAML resolves scalars by YAML 1.1 and so leaves ``00009``, ``0o17`` or ``1e3`` bare, which a
YAML 1.2 reader (kubectl's, Go's yaml.v3, ruamel) reads as the numbers 9, 15 and 1000: a label
``pod-template-hash: "00009"`` would come back as an integer. kubectl (go-yaml) quotes them.
"""

from __future__ import annotations

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
