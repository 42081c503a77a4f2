"""Plain text for the command line, without rich (which costs commands like ``get`` start-up
time): names made safe to print, error messages on one line, zone keys and node statuses as a
person reads them.

Everything the CLI prints that came from a user, a manifest or Redis (node, pod and zone names,
error messages, event fields) goes through :func:`printable` first. Kubernetes names are not
guaranteed to be tame by the time they reach us: the zone key is ``region:\\0:zone`` by
construction (as upstream's ``GetZoneKey``), and a manifest can carry control characters,
terminal escape sequences, lone surrogates or rich markup (``a[/]``). Printed raw they make
``grep`` call the output binary, rewrite the user's terminal, crash the encoder or crash rich.
"""

from __future__ import annotations

import unicodedata

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Node

# Unicode categories never printed as they are: controls (C0, DEL, C1), format characters
# (bidi overrides, zero-width joiners), surrogates (unencodable), line/paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def unprintable(char: str) -> bool:
    """Whether :func:`printable` escapes ``char`` (and ``-o json`` / ``-o yaml`` keep it an
    escape where kubectl writes it raw): its category is one of those above."""
    return unicodedata.category(char) in _UNPRINTABLE


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    """``str(value)`` with every control, format or surrogate character escaped as Python
    writes it (``\\x00``, ``\\x1b``, ``\\u202e``, ``\\udc80``): one line, plain text, safe for
    a terminal, ``grep`` and any encoder."""
    text = str(value)
    if text.isprintable():  # the common case, in C
        return text
    return "".join(_escape(c) if c != " " and unprintable(c) else c for c in text)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_GO_ESCAPES |= {"\v": "\\v", '"': '\\"', "\\": "\\\\"}


def go_quoted(text: str) -> str:
    """``text`` in double quotes, as Go's ``%q`` (``strconv.Quote``) writes a string: what
    Go's ``unicode.IsPrint`` takes (letters, marks, numbers, punctuation, symbols, the ASCII
    space) as it is, anything else escaped (``\\x1b``, ``\\u202e``; a byte that was not
    UTF-8, an argument's surrogate escape, ``\\xff``)."""
    out = []
    for char in text:
        code = ord(char)
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char == " " or unicodedata.category(char)[0] in "LMNPS":
            out.append(char)
        elif code < 0x20 or code == 0x7F or 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code & 0xFF:02x}")
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def one_line(value: object) -> str:
    """An error message as one printable line: line breaks become ``; `` (a YAML error spans
    several lines), everything else as :func:`printable`."""
    lines = [line.strip() for line in str(value).splitlines()]
    return printable("; ".join(line for line in lines if line))


def zone_text(value: str) -> str:
    """A zone key (``region:\\x00:zone``, upstream's ``GetZoneKey``) as a person writes it:
    ``region/zone``."""
    return value.replace(":\x00:", "/")


# -- node status, as kubectl prints it -------------------------------------------------------


def node_status(info: NodeInfo) -> str:
    """STATUS of ``kubectl get nodes`` for a live node: the Ready condition (``Ready``,
    ``NotReady``, ``Unknown`` when it is missing or unknown) and ``,SchedulingDisabled`` for a
    cordoned node. An entry without a node object is a ``Ghost`` (removed, pods remain) or a
    ``Placeholder`` (pods arrived before their node)."""
    node = info.node
    if node is None:
        return "Ghost" if info.allocatable.milli_cpu else "Placeholder"
    status = ready_condition(node)
    return f"{status},SchedulingDisabled" if node.unschedulable else status


def ready_condition(node: Node) -> str:
    """``Ready``/``NotReady`` from the node's ``Ready`` condition; ``Unknown`` when it is
    unknown or missing (never a guessed ``Ready``)."""
    return {"True": "Ready", "False": "NotReady"}.get(node.ready, "Unknown")


def plural(count: int, noun: str) -> str:
    """``1 object``, ``2 objects``: a count with its noun (regular plurals only)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
