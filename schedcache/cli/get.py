"""``schedcache get pods|nodes`` and ``schedcache describe pod|node``: the cache's objects in
kubectl's shapes (flags, columns, units, NotFound lines), so a kubectl user reads them without
a manual.

What does not exist is one ``Error from server (NotFound): pods "x" not found`` line on stderr
and exit status 1, after whatever was found is printed (kubectl's behaviour for several names).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from schedcache.cache import Cache
from schedcache.cli.completion import complete_kinds, complete_names, complete_namespaces
from schedcache.cli.objects import (
    NODE_COLUMNS,
    NODE_WIDE,
    POD_COLUMNS,
    POD_WIDE,
    CachedPod,
    Seen,
    cached_pods,
    node_object,
    node_row,
    pod_object,
    pod_row,
)
from schedcache.cli.params import F, Name
from schedcache.cli.printing import Output, output_option, print_objects, sort_by
from schedcache.cli.settings import Settings
from schedcache.cli.text import go_quoted, node_status, printable
from schedcache.errors import ValidationError
from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.selectors import parse_selector

KINDS = {"pods": "pod", "pod": "pod", "po": "pod", "nodes": "node", "node": "node", "no": "node"}
PLURAL = {"pod": "pods", "node": "nodes"}
FIELDS = {
    "pod": ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"),
    "node": ("metadata.name", "spec.unschedulable"),
}


def kind_of(ctx: click.Context, param: click.Parameter, value: str) -> str:
    kind = KINDS.get(value.lower())
    if kind is None:
        raise click.BadParameter(
            f"the server doesn't have a resource type {printable(value)!r} (schedcache knows "
            "pods and nodes)",
            ctx,
            param,
        )
    return kind


def field_filter(text: str | None, kind: str) -> Callable[[dict[str, Any]], bool]:
    """``--field-selector`` (``key=value``, ``key==value``, ``key!=value``, comma-separated)
    as a test on a v1-shaped object, parsed as kubectl's ``fields.ParseSelector`` parses it
    (``\\,``, ``\\=`` and ``\\\\`` escapes in values; an unescaped ``,`` or ``=`` in a value,
    a term without an operator: refused); a selector kubectl's server would refuse, an
    unknown field among them, is an error, exit status 1 (kubectl parses none itself: its
    server answers 400 BadRequest). Only the whole selector is trimmed (cli-runtime's
    ``FieldSelectorParam``): a space around a key or a value is part of it, as in
    ``ParseSelector``, so ``spec.nodeName = n1`` names an unknown field and ``spec.nodeName=
    n1`` a node " n1"."""
    selector = go_trimmed(text or "")
    tests: list[tuple[str, str, bool]] = []
    for term in _split_terms(selector):
        if not term:
            continue
        split = _split_term(term)
        if split is None:  # kubectl's words (found in review: taken as `spec.nodeName=`)
            raise _selector_error(
                f"invalid selector: '{printable(selector)}'; can't understand '{printable(term)}'"
            )
        key, operator, value = split
        tests.append((_known_field(key, kind), _unescaped(value), operator == "!="))

    def matches(document: dict[str, Any]) -> bool:
        for key, value, negate in tests:
            found: Any = document
            for part in key.split("."):
                found = found.get(part, "") if isinstance(found, dict) else ""
            if key in BOOLEAN_FIELDS:  # the API's field set: strconv.FormatBool, unset false
                found = bool(found)
            shown = str(found).lower() if isinstance(found, bool) else str(found)
            if (shown == value) == negate:
                return False
        return True

    return matches


def _known_field(key: str, kind: str) -> str:
    """``key`` if kubectl's server selects ``kind`` by it, else an error naming it (and
    the spaces around it, which kubectl keeps: found in review, ``spec.nodeName = n1`` was
    trimmed and taken)."""
    if key in FIELDS[kind]:
        return key
    spaced = " (kubectl keeps the spaces around it)" if key.strip() in FIELDS[kind] else ""
    raise _selector_error(
        f'"{printable(key)}" is not a known field selector for {PLURAL[kind]}{spaced}: only '
        + ", ".join(f'"{f}"' for f in FIELDS[kind])
    )


# What Go's strings.TrimSpace trims (unicode.IsSpace): Python's str.strip() trims \x1c-\x1f too.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    map(chr, range(0x2000, 0x200B))
)


def go_trimmed(text: str) -> str:
    """``text`` without the leading and trailing spaces Go's ``strings.TrimSpace`` takes off."""
    return text.strip(GO_SPACE)


# Fields whose selector value is a boolean's text ("true"/"false"; an unset one is "false").
BOOLEAN_FIELDS = frozenset({"spec.unschedulable"})


def _selector_error(message: str) -> click.ClickException:
    """A ``--field-selector`` kubectl sends as it is, which its server refuses (400
    BadRequest: kubectl's exit status 1, not a usage error's 2)."""
    return click.ClickException(message)


def _split_terms(text: str) -> list[str]:
    """The selector's terms: split at each comma that no backslash escapes."""
    terms, start, escaped = [], 0, False
    for at, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(text[start:at])
            start = at + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """``key``, operator and value of one selector term, split at its first operator as
    kubectl splits it (``a===b`` is ``a``, ``==`` and ``=b``, which :func:`_unescaped` then
    refuses); None without one."""
    for at in range(len(term)):
        for operator in ("!=", "==", "="):
            if term.startswith(operator, at):
                return term[:at], operator, term[at + len(operator) :]
    return None


def _unescaped(value: str) -> str:
    """A term's value with its escapes taken out, as kubectl's ``UnescapeValue``: ``\\,``,
    ``\\=`` and ``\\\\`` stand for the character; any other escape, a lone trailing
    backslash, or a bare ``,`` or ``=`` is refused (found in review: ``spec.nodeName!==n1``
    was read as "not =n1" and matched every pod)."""
    out, escaped = [], False
    for char in value:
        if escaped:
            if char not in "\\,=":
                sequence = printable("\\" + char)
                raise _selector_error(
                    f"invalid field selector: invalid escape sequence: '{sequence}'"
                )
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise _selector_error(f"invalid field selector: unescaped character in value: '{char}'")
        else:
            out.append(char)
    if escaped:
        raise _selector_error("invalid field selector: invalid escape sequence: '\\'")
    return "".join(out)


def label_filter(
    text: str | None, kind: str, field_selector: str | None = None
) -> Callable[[dict[str, str]], bool]:
    """``-l``/``--selector`` as a test on a label map. One that does not parse is an error,
    exit status 1, worded as kubectl words its server's 400 BadRequest (kubectl parses none
    itself: cli-runtime's ``EnhanceListError``, both selectors trimmed, Go-quoted), with
    schedcache's reason: ``Unable to find "/v1, Resource=pods" that match label selector "a
    b", field selector "": "a b": expected k=v, ...``. It was a usage error, exit status 2."""
    try:
        selector = parse_selector(text)
    except ValidationError as error:
        reason = f"{go_quoted(error.field)}: {error.reason}" if error.field else error.reason
        raise click.ClickException(
            printable(
                f'Unable to find "/v1, Resource={PLURAL[kind]}" that match label selector '
                f"{go_quoted(go_trimmed(text or ''))}, field selector "
                f"{go_quoted(go_trimmed(field_selector or ''))}: {reason}"
            )
        ) from None
    return selector.matches


def not_found(kind: str, names: list[str]) -> None:
    """kubectl's NotFound lines on stderr, then exit status 1."""
    for name in names:
        click.echo(
            f'Error from server (NotFound): {PLURAL[kind]} "{printable(name)}" not found', err=True
        )
    sys.exit(1)


def no_resources(namespace: str | None) -> None:
    """kubectl get's line for an empty table, on stderr, in its two forms (get.go): ``No
    resources found in NS namespace.`` for a namespaced listing; ``No resources found``, no
    full stop, across all namespaces (``-A``) and for cluster-scoped kinds (``namespace``
    None)."""
    where = f" in {printable(namespace)} namespace." if namespace is not None else ""
    click.echo(f"No resources found{where}", err=True)


def shows_empty(output: Output, names: tuple[str, ...]) -> bool:
    """Whether a listing that found nothing is still printed: kubectl's printers other than
    the table (``-o json|yaml|name|jsonpath|custom-columns``) print an empty v1 List (``items:
    []``; custom-columns its header line, ``-o name`` nothing), and no "No resources found"
    line; not for one name that does not exist (only its NotFound line, kubectl's
    ``singleItemImplied``)."""
    return not output.is_table and len(names) != 1


def find_pods(
    entries: list[CachedPod], names: tuple[str, ...], namespace: str | None
) -> tuple[list[CachedPod], list[str]]:
    """The pods ``names`` mean in ``namespace`` (``NS/NAME`` and a uid are accepted too, as
    the older ``get pod`` took them), and the names that matched nothing."""
    found, missing = [], []
    for name in names:
        ns, _, short = name.rpartition("/") if "/" in name else (namespace or "default", "", name)
        match = [e for e in entries if (e.pod.namespace, e.pod.name) == (ns, short)]
        match = match or [e for e in entries if e.pod.uid == name]
        if match:
            found.append(match[0])
        else:
            missing.append(name)
    return found, missing


def namespace_option(command: F) -> F:
    """``-n/--namespace`` (completed from the cache's pods)."""
    return click.option(
        "-n",
        "--namespace",
        type=Name(),
        default=None,
        shell_complete=complete_namespaces,
        help="Namespace [default: default].",
    )(command)


def selection_options(command: F) -> F:
    for option in reversed(
        [
            namespace_option,
            click.option("-A", "--all-namespaces", is_flag=True, help="Pods of every namespace."),
            click.option(
                "-l", "--selector", default=None, help="Label selector (k=v, k!=v, k in (a,b), k)."
            ),
            click.option(
                "--field-selector",
                default=None,
                help="spec.nodeName=NODE, metadata.name=, metadata.namespace=, status.phase= "
                "(pods); metadata.name=, spec.unschedulable= (nodes); != negates.",
            ),
        ]
    ):
        command = option(command)
    return command


@click.command("get")
@click.argument("kind", metavar="pods|nodes", callback=kind_of, shell_complete=complete_kinds)
@click.argument("names", metavar="[NAME]...", nargs=-1, type=Name(), shell_complete=complete_names)
@selection_options
@output_option
@click.option("--no-headers", is_flag=True, help="Tables without the header line.")
@click.option("--sort-by", default=None, metavar="JSONPATH", help="Sort by this field.")
@click.pass_obj
def get(
    settings: Settings,
    kind: str,
    names: tuple[str, ...],
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    field_selector: str | None,
    output: Output,
    no_headers: bool,
    sort_by: str | None,
) -> None:
    """Pods or nodes of the cache as `kubectl get` shows them: `get pods` (namespace default,
    -n NS, -A), `get pod NAME`, `get nodes`, with -l, --field-selector, -o, --no-headers and
    --sort-by. Pods the cache only assumed show STATUS Assumed; -o json|yaml carry the cache's
    own state under status.schedcache."""
    # kubectl's refusals, before anything is read, in its order (cli-runtime's builder: a
    # selector first; a blank one is none, as kubectl trims it). Found in review: a name with
    # -l or --field-selector was taken and judged unevenly (`get nodes n1 --field-selector
    # metadata.name=n2` printed nothing, `get pods web-0 -l app=x -o name` printed the pod).
    if names and ((selector or "").strip() or go_trimmed(field_selector or "")):
        raise click.ClickException("name cannot be provided when a selector is specified")
    if names and all_namespaces:
        raise click.ClickException("a resource cannot be retrieved by name across all namespaces")
    cache = settings.existing_cache()
    # One name is kubectl's single item: printed as itself, never sorted (its SortingPrinter
    # sorts lists only), so --sort-by is neither read nor checked for it.
    order = None if len(names) == 1 else sort_by
    listing = Listing(
        label_filter(selector, kind, field_selector),
        field_filter(field_selector, kind),
        output,
        no_headers,
        order,
    )
    if kind == "pod":
        _get_pods(cache, names, namespace, all_namespaces, listing)
    else:
        _get_nodes(cache, names, listing)


@dataclass(frozen=True)
class Listing:
    """What `get` keeps of what it found, in which order, and how it prints it."""

    labels: Callable[[dict[str, str]], bool]
    fields: Callable[[dict[str, Any]], bool]
    output: Output
    no_headers: bool
    order: str | None

    def pick(self, documents: list[dict[str, Any]]) -> list[int]:
        """The indexes of the documents --field-selector keeps, in --sort-by's order."""
        keep = [i for i, d in enumerate(documents) if self.fields(d)]
        kept = [documents[i] for i in keep]
        return [keep[i] for i in sort_by(kept, self.order, self.output.is_table)]


def _get_pods(
    cache: Cache,
    names: tuple[str, ...],
    namespace: str | None,
    all_namespaces: bool,
    listing: Listing,
) -> None:
    output, no_headers = listing.output, listing.no_headers
    state = cache.dump()
    entries = cached_pods(state.nodes, state.assumed_pods)
    missing: list[str] = []
    if names:
        entries, missing = find_pods(entries, names, namespace)
        if len(names) == 1 and entries:
            record = cache.get_pod_record(entries[0].pod.uid)
            documents = [pod_object(entries[0], _record_state(record))]
            _show_pods(cache, entries, documents, output, no_headers, single=True, namespaces=False)
            return
    elif not all_namespaces:
        entries = [e for e in entries if e.pod.namespace == (namespace or "default")]
    entries = [e for e in entries if listing.labels(e.pod.labels)]
    if not names:  # the API server's order (namespace, name): --sort-by's ties keep it
        entries.sort(key=lambda e: (e.pod.namespace, e.pod.name))
    documents = [pod_object(e) for e in entries]
    picked = listing.pick(documents)
    entries = [entries[i] for i in picked]
    documents = [documents[i] for i in picked]
    if not entries and not names and output.is_table:
        no_resources(None if all_namespaces else namespace or "default")
    elif entries or shows_empty(output, names):
        _show_pods(cache, entries, documents, output, no_headers, False, all_namespaces)
    if missing:
        not_found("pod", missing)


def _record_state(record: Any) -> dict[str, Any]:
    return {
        "state": record.state,
        "node": record.node,
        "bindingFinished": record.binding_finished,
        "deadlineMs": record.deadline_ms,
        "generation": record.generation,
    }


def _show_pods(
    cache: Cache,
    entries: list[CachedPod],
    documents: list[dict[str, Any]],
    output: Output,
    no_headers: bool,
    single: bool,
    namespaces: bool,
) -> None:
    headers: tuple[str, ...] = ()
    rows: list[list[str]] = []
    if output.is_table:
        dated = all(e.pod.created_ms for e in entries)  # then AGE needs no stream read
        seen = Seen.now() if dated else Seen.read(cache)
        wide = output.kind == "wide"
        headers = ("NAMESPACE",) * namespaces + POD_COLUMNS + POD_WIDE * wide
        rows = [[e.pod.namespace] * namespaces + pod_row(e, seen, wide) for e in entries]
    print_objects(output, documents, single, "pod", no_headers, headers, rows)


def _labels(info: NodeInfo) -> dict[str, str]:
    return info.node.labels if info.node is not None else {}


def _get_nodes(cache: Cache, names: tuple[str, ...], listing: Listing) -> None:
    output, no_headers = listing.output, listing.no_headers
    nodes = cache.dump().nodes
    missing = [name for name in names if name not in nodes]
    chosen = [n for n in names if n in nodes] if names else sorted(nodes)
    chosen = [n for n in chosen if listing.labels(_labels(nodes[n]))]
    documents = [node_object(n, nodes[n]) for n in chosen]
    picked = listing.pick(documents)
    chosen = [chosen[i] for i in picked]
    documents = [documents[i] for i in picked]
    if not chosen and not names and output.is_table:
        no_resources(None)  # nodes are cluster-scoped
    elif chosen or shows_empty(output, names):
        headers: tuple[str, ...] = ()
        rows: list[list[str]] = []
        if output.is_table:
            dated = all(getattr(nodes[n].node, "created_ms", 0) for n in chosen)
            seen = Seen.now() if dated else Seen.read(cache)
            wide = output.kind == "wide"
            headers = NODE_COLUMNS + NODE_WIDE * wide
            rows = [node_row(n, nodes[n], node_status(nodes[n]), seen, wide) for n in chosen]
        print_objects(output, documents, len(names) == 1, "node", no_headers, headers, rows)
    if missing:
        not_found("node", missing)
