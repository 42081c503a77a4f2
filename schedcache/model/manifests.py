"""Reading Kubernetes manifests: kubectl's JSON/YAML text into documents, and those documents
(one object or a List) into :class:`~schedcache.model.values.Pod` and
:class:`~schedcache.model.values.Node` values.

One reader of an object (:mod:`schedcache.model.reading`) serves every entry point
(``schedcache load``, :func:`load_k8s_file`, ``Pod.from_k8s``), so the same limits and the
same errors apply wherever a manifest comes in. Every manifest error is a
:class:`~schedcache.errors.ValidationError` naming the object and the dotted field path.

The document reader is bounded: YAML goes through libyaml when PyYAML has it, documents nested
deeper than :data:`MAX_DEPTH` or whose aliases would expand past :data:`MAX_ALIAS_NODES` extra
nodes (a "billion laughs" file) are refused before anything is built from them.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from schedcache.errors import ValidationError
from schedcache.model.reading import show, type_name
from schedcache.model.values import (
    Node,
    Pod,
)

__all__ = [
    "LIST_KINDS",
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "YAML_LOADER",
    "Entry",
    "decode_input",
    "entries",
    "load_k8s_file",
    "objects_from_k8s",
    "parse_documents",
    "subject",
    "type_name",
]

# The kinds of kubectl's lists, and the kind each implies for items that leave it out.
LIST_KINDS: dict[str, str | None] = {"List": None, "PodList": "Pod", "NodeList": "Node"}
# Nesting of any document: Kubernetes objects (managedFields included) stay under 30 levels.
MAX_DEPTH = 100
# Nodes that YAML aliases may add to a document beyond its own (an anchor used twice adds its
# size once more): plenty for hand-written anchors, far below an exponential alias bomb.
MAX_ALIAS_NODES = 100_000
# libyaml's parser when PyYAML was built with it (about 3x faster), else the pure-Python one.
YAML_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE: it starts with the same bytes
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class Entry:
    """One object of the input: where it was, the watch event type (LISTED outside watches),
    and ``problem`` when the input around it is already wrong."""

    position: str
    event: str
    object: Any
    problem: str = ""


# --------------------------------------------------------------------------------------------
# Text and documents


def decode_input(data: bytes, source: str = "input") -> str:
    """The text of a file: UTF-8, or UTF-16/32 with a byte order mark; anything else (a
    binary file) is a :class:`ValidationError` naming ``source`` and the offset of the first
    bad byte."""
    encoding = "utf-8"
    for bom, name in _BOMS:
        if data.startswith(bom):
            data, encoding = data[len(bom) :], name
            break
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        raise ValidationError(
            source,
            "",
            f"not {encoding.upper()} text (byte 0x{data[error.start]:02x} at offset "
            f"{error.start}); give kubectl's JSON or YAML output",
        ) from None
    if "\x00" in text:  # valid UTF-8, but neither JSON nor YAML can hold a raw NUL
        raise ValidationError(
            source, "", "NUL bytes: binary, or UTF-16/32 without a BOM (byte order mark)"
        )
    return text


def parse_documents(
    text: str | bytes, *, source: str = "input", require_objects: bool = True
) -> list[Any]:
    """Every top-level value: a JSON stream (concatenated values), else YAML documents.

    Errors name ``source``. With ``require_objects``, YAML whose documents are not all mappings
    is refused as a whole: any sentence parses as a YAML string, so it is not a Kubernetes file
    with one bad object. Without it the caller judges each document (and names the bad one).
    """
    if isinstance(text, bytes):
        text = decode_input(text, source)
    values = _json_values(text, source)
    if values is None:
        values = _yaml_documents(text, source)
        if require_objects and not all(isinstance(doc, Mapping) for doc in values):
            raise ValidationError(source, "", "expected Kubernetes objects, lists or watch events")
    for number, value in enumerate(values):
        _check_depth(value, f"document {number}", source)
    return values


def _json_values(text: str, source: str) -> list[Any] | None:
    """The values of a JSON stream, or None when ``text`` does not start as JSON."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    index = 0
    try:
        while True:
            while index < len(text) and text[index].isspace():
                index += 1
            if index == len(text):
                return values
            value, index = decoder.raw_decode(text, index)
            values.append(value)
    except json.JSONDecodeError as error:
        if values:  # JSON that broke off: not YAML either
            raise ValidationError(source, f"offset {index}", f"invalid JSON: {error.msg}") from None
        return None
    except RecursionError:
        raise _too_deep(f"document {len(values)}", source) from None


def _yaml_documents(text: str, source: str) -> list[Any]:
    """The YAML documents of ``text`` but the empty ones, checked for depth and aliases first."""
    _check_yaml_events(text, source)
    loader = YAML_LOADER(text)  # a SafeLoader: plain YAML types only, never Python objects
    try:
        documents = []
        while loader.check_data():
            document = loader.get_data()
            if document is not None:
                documents.append(document)
        return documents
    except yaml.YAMLError as error:
        raise _not_json_or_yaml(source, error) from None
    except RecursionError:  # pragma: no cover - _check_yaml_events bounds the depth first
        raise _too_deep("document", source) from None
    finally:
        loader.dispose()


def _check_yaml_events(text: str, source: str) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH or whose aliases would expand past
    MAX_ALIAS_NODES, from the parser's events alone: nothing recursive (libyaml's composer is,
    and a deep enough document overflows the C stack) and nothing expanded runs before."""
    depth = 0
    sizes: list[int] = []  # expanded nodes of each open collection
    anchors: dict[str, int] = {}  # expanded size of each anchored node
    opened: list[str | None] = []  # the anchor of each open collection
    own = expanded = 0
    try:
        for event in yaml.parse(text, Loader=YAML_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep("document", source)
                sizes.append(1)
                opened.append(event.anchor)
                own += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                size, anchor = sizes.pop(), opened.pop()
                if anchor is not None:
                    anchors[anchor] = size
                if sizes:
                    sizes[-1] += size
                else:
                    expanded += size
            elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                if isinstance(event, yaml.AliasEvent):
                    size = anchors.get(event.anchor or "", 1)
                else:
                    size, own = 1, own + 1
                    if event.anchor is not None:
                        anchors[event.anchor] = 1
                if sizes:
                    sizes[-1] += size
                else:
                    expanded += size
                if (sum(sizes) if sizes else 0) + expanded - own > MAX_ALIAS_NODES:
                    raise ValidationError(
                        source,
                        "",
                        f"YAML aliases expand to over {MAX_ALIAS_NODES:,} more nodes than the "
                        "document has; refusing it (expand the aliases, or split the file)",
                    )
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(error):  # libyaml >= 0.2.6 stops at 1,000 levels itself
            raise _too_deep("document", source) from None
        raise _not_json_or_yaml(source, error) from None


def _check_depth(value: Any, where: str, source: str) -> None:
    """Refuse a value nested deeper than MAX_DEPTH (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where, source)
        if isinstance(item, Mapping):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _too_deep(where: str, source: str) -> ValidationError:
    return ValidationError(source, where, f"nested deeper than {MAX_DEPTH} levels")


def _not_json_or_yaml(source: str, error: yaml.YAMLError) -> ValidationError:
    return ValidationError(
        source, "", f"not valid JSON or YAML (neither JSON nor YAML parses it): {error}"
    )


def list_items(document: Mapping[str, Any]) -> list[Any] | None:
    """The items of a List/PodList/NodeList (none when ``items`` is absent), each given the
    kind its list implies when it has none (kubectl leaves ``kind`` out of a PodList's items);
    None when ``items`` is not a list."""
    items = document.get("items")
    if items is None:
        return []
    if not isinstance(items, list | tuple):
        return None
    implied = LIST_KINDS[document["kind"]]
    if implied is None:
        return list(items)
    return [
        {**item, "kind": implied} if isinstance(item, Mapping) and "kind" not in item else item
        for item in items
    ]


def entries(documents: list[Any]) -> Iterator[Entry]:
    """The objects of parsed documents, in order: single objects, the items of lists, and the
    objects of watch events (each with its event type); what is wrong around an object (not a
    mapping, ``items`` not a list) comes as its ``problem``."""
    for number, document in enumerate(documents):
        where = f"document {number}" if len(documents) > 1 else "document"
        if not isinstance(document, Mapping):
            # (found in review: "expected ... a list ..., found list" for a JSON array: a
            # kubectl List is an object of kind List, and an array is no document of kubectl's)
            found = "an array" if isinstance(document, list | tuple) else type_name(document)
            problem = (
                "expected an object: one object, a kind List as `kubectl get -o json` prints, "
                f"or a watch event; found {found}"
            )
            yield Entry(where, "LISTED", document, problem)
            continue
        kind = document.get("kind")
        if "type" in document and "object" in document and kind is None:
            yield Entry(f"event {number}", str(document["type"]), document["object"])
        elif isinstance(kind, str) and kind in LIST_KINDS:
            items = list_items(document)
            if items is None:
                problem = f"items: must be a list, found {type_name(document['items'])}"
                yield Entry(where, "LISTED", document, problem)
                continue
            for index, item in enumerate(items):
                yield Entry(f"items[{index}]", "LISTED", item)
        else:
            yield Entry(where, "LISTED", document)


def subject(obj: Any) -> str:
    """``pod <namespace>/<name>``, ``node <name>``, ``<kind> <name>``: what an object calls
    itself, read defensively (the object may be the invalid one)."""
    if not isinstance(obj, Mapping):
        return type_name(obj)
    kind = obj.get("kind")
    if isinstance(kind, str) and kind in LIST_KINDS:
        return kind
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    name = name if isinstance(name, str) and name else "<unnamed>"
    namespace = meta.get("namespace")
    label = kind.lower() if isinstance(kind, str) and kind else "object"
    if kind == "Pod":
        return f"pod {namespace if isinstance(namespace, str) and namespace else 'default'}/{name}"
    if isinstance(namespace, str) and namespace:
        return f"{label} {namespace}/{name}"
    return f"{label} {name}"


# --------------------------------------------------------------------------------------------
# Pods and nodes from documents

_BUILDERS: dict[str, Callable[[Any], Pod | Node]] = {"Pod": Pod.from_k8s, "Node": Node.from_k8s}


def objects_from_k8s(doc: Any) -> list[Pod | Node]:
    """Pods and nodes from one Pod/Node manifest or a List/PodList/NodeList (``kubectl -o json``).

    Errors inside a list keep the item's object name and prefix the field with ``items[i].``.
    """
    if not isinstance(doc, Mapping):
        raise ValidationError("object", "", "must be a mapping")
    kind = doc.get("kind")
    if kind in _BUILDERS:
        return [_BUILDERS[kind](doc)]
    if not isinstance(kind, str) or kind not in LIST_KINDS:
        if kind is None:
            raise ValidationError("object", "kind", "is required")
        raise ValidationError("object", "kind", f"unsupported kind {show(kind)}")
    implied = LIST_KINDS[kind]
    items = list_items(doc)
    if items is None:
        raise ValidationError(kind, "items", "must be a list")
    out: list[Pod | Node] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValidationError(kind, f"items[{i}]", "must be a mapping")
        item_kind = item.get("kind") or implied
        if item_kind is None:
            raise ValidationError(kind, f"items[{i}].kind", "is required")
        if item_kind not in _BUILDERS or (implied and item_kind != implied):
            raise ValidationError(kind, f"items[{i}].kind", f"unsupported kind {show(item_kind)}")
        try:
            out.append(_BUILDERS[item_kind](item))
        except ValidationError as exc:
            where = f"items[{i}].{exc.field}" if exc.field else f"items[{i}]"
            raise ValidationError(exc.obj, where, exc.reason) from exc
    return out


def load_k8s_file(path_or_text: str | os.PathLike[str]) -> list[Pod | Node]:
    """Parse a JSON or (multi-document) YAML file, or such text, into pods and nodes.

    A ``str`` is read as a path when it is a single line without ``{``, ``[`` or ``:``. The
    text goes through :func:`parse_documents`, as ``schedcache load``'s does (same encodings,
    limits and errors, naming the path or ``<text>``); :func:`objects_from_k8s` judges each
    document, so a document that is not an object is named as such.
    """
    data: str | bytes
    if isinstance(path_or_text, os.PathLike) or not any(ch in path_or_text for ch in "\n{[:"):
        source = os.fspath(path_or_text)
        data = Path(source).read_bytes()
    else:
        source, data = "<text>", path_or_text
    docs = parse_documents(data, source=source, require_objects=False)
    return [o for doc in docs if doc is not None for o in objects_from_k8s(doc)]
