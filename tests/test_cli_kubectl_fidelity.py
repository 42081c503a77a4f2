"""``get`` as kubectl behaves where earlier reviews left gaps, on every backend: an index past
the end of a list in ``-o custom-columns`` and ``--sort-by`` (kubectl fails, its jsonpath's
``evalArray`` error), spaces in ``--field-selector`` (kubectl keeps them), and the order of keys
in ``-o json|yaml`` (kubectl's are sorted: ``kubectl get`` prints unstructured objects, maps)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.test_cli_kubectl import loaded_cli, ok


def pod(name: str, tolerations: int, **labels: str) -> dict[str, Any]:
    """A bound pod with ``tolerations`` tolerations (keys t0, t1, ...)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "nginx"}],
            "tolerations": [
                {"key": f"t{i}", "operator": "Exists", "effect": "NoSchedule"}
                for i in range(tolerations)
            ],
        },
        "status": {"phase": "Running"},
    }


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "uid": "uid-n1"},
    "status": {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
# Labels in an order no sort gives (kubectl prints them sorted).
LABELS = {"zone": "z1", "app": "web", "app10": "x", "app2": "y", "App": "up", "a-1": "d"}
CLUSTER = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [NODE, pod("a", 2, **LABELS), pod("b", 1), pod("c", 2)],
}
SECOND = ".spec.tolerations[1].key"


@pytest.fixture
def kube(client, cache, cache_name, monkeypatch, tmp_path):
    """``kube(*args)``: schedcache on this test's backend, with CLUSTER loaded."""
    return loaded_cli(CLUSTER, client, cache_name, monkeypatch, tmp_path)


def failed(result: Any, *words: str) -> str:
    """The one error line of a failed run (exit status 1, no traceback), holding ``words``."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return str(lines[0])


# -- 1. an index past the end of a list -------------------------------------------------------


def test_custom_columns_fail_at_an_index_past_the_end_as_kubectl(backend, kube):
    # kubectl's customcolumn.go returns FindResults' error (client-go's evalArray fails whatever
    # AllowMissingKeys says): the rows before the object are printed, then `error: array index
    # out of bounds: index 1, length 1`, exit status 1. Before: b's cell read <none>, exit 0.
    columns = f"custom-columns=NAME:.metadata.name,SECOND:{SECOND}"
    result = kube("get", "pods", "-o", columns)
    assert result.stdout.splitlines() == ["NAME   SECOND", "a      t1"]
    failed(
        result,
        f"custom column 'SECOND:{SECOND}' of pod default/b",
        "array index out of bounds: index 1, length 1",
    )
    quiet = kube("get", "pods", "-o", columns, "--no-headers")
    assert quiet.stdout == "a     t1\n"  # a column is 6 wide at least, as kubectl's tabwriter
    alone = kube("get", "pod", "b", "-o", columns)
    assert alone.stdout.splitlines() == ["NAME   SECOND"]  # kubectl's header, then the error
    failed(alone, "index 1, length 1")
    # A negative index counts from the end, and is shown with the length added, as kubectl.
    failed(kube("get", "pods", "-o", "custom-columns=X:.spec.tolerations[-3].key"), "index -1")
    string = kube("get", "pods", "-o", "custom-columns=X:.metadata.name[0]")
    failed(string, "string is not array or slice")


def test_custom_columns_still_print_none_for_what_is_not_there(backend, kube):
    # A missing key selects nothing (kubectl's AllowMissingKeys): <none>, exit 0, even indexed.
    columns = (
        "custom-columns=NAME:.metadata.name,X:.spec.nothing[5].key,FIRST:.spec.tolerations[0].key"
    )
    assert ok(kube("get", "pods", "-o", columns)).splitlines() == [
        "NAME   X        FIRST",
        "a      <none>   t0",
        "b      <none>   t0",
        "c      <none>   t0",
    ]


@pytest.mark.parametrize(
    "output", [[], ["-o", "name"], ["-o", "json"], ["-o", "custom-columns=N:.metadata.name"]]
)
def test_sort_by_an_index_past_the_end_fails_before_printing(backend, kube, output):
    # kubectl's sorter (SortObjects, RuntimeSort.Less) fails on b's one toleration: nothing
    # printed. Before: b sorted as if the field were missing, exit 0.
    result = kube("get", "pods", "--sort-by", SECOND, *output)
    assert result.stdout == ""
    failed(result, f"--sort-by '{SECOND}' of pod default/b", "index 1, length 1")
    nodes = kube("get", "nodes", "--sort-by", ".status.conditions[1].type", *output[:2])
    assert nodes.stdout == ""
    failed(nodes, "of node n1", "index 1, length 1")


def test_sort_by_within_bounds_and_for_one_name_is_as_before(backend, kube):
    by_first = ok(kube("get", "pods", "--sort-by", ".spec.tolerations[0].key", "-o", "name"))
    assert by_first.split() == ["pod/a", "pod/b", "pod/c"]
    # One name is kubectl's single item: never sorted, so the path is not read.
    assert ok(kube("get", "pod", "b", "--sort-by", SECOND, "-o", "name")) == "pod/b\n"
    assert ok(kube("get", "node", "n1", "--sort-by", ".status.conditions[3].type")).startswith(
        "NAME"
    )
    # A path no object has fails as kubectl's sorter fails it (found in review: the listing
    # printed unsorted, exit 0), unless there is nothing to sort.
    for output in ([], ["-o", "name"]):
        nowhere = kube("get", "pods", "--sort-by", ".status.startTime", *output)
        assert nowhere.stdout == ""
        failed(nowhere, 'couldn\'t find any field with path "{.status.startTime}" in the list')
    empty = kube("get", "pods", "-l", "app=none", "--sort-by", ".nope", "-o", "name")
    assert ok(empty) == ""
    some = ok(kube("get", "pods", "--sort-by", ".metadata.labels.app", "-o", "name"))
    assert some.split() == ["pod/b", "pod/c", "pod/a"]  # the missing first, as kubectl
    # A path that does not parse is still a usage error (exit status 2).
    assert kube("get", "pods", "--sort-by", "{.spec").exit_code == 2


# -- 2. spaces in --field-selector ------------------------------------------------------------


def test_field_selector_trims_only_the_whole_selector_as_kubectl(backend, kube):
    # cli-runtime's FieldSelectorParam trims the whole selector (strings.TrimSpace) ...
    padded = kube("get", "pods", "--field-selector", " \tspec.nodeName=n1 ", "-o", "name")
    assert ok(padded).split() == ["pod/a", "pod/b", "pod/c"]
    assert ok(kube("get", "pod", "a", "--field-selector", "  ", "-o", "name")) == "pod/a\n"
    # ... and fields.ParseSelector nothing else: a value's spaces are part of it (no node is
    # named " n1": nothing matches, as on kubectl's server) ...
    for selector in ("spec.nodeName= n1", "spec.nodeName=n1 ,metadata.name=a"):
        spaced = kube("get", "pods", "--field-selector", selector)
        assert spaced.exit_code == 0 and spaced.stdout == "", selector
        assert spaced.stderr == "No resources found in default namespace.\n"
    assert ok(
        kube("get", "pods", "--field-selector", "spec.nodeName!= n1", "-o", "name")
    ).split() == [
        "pod/a",
        "pod/b",
        "pod/c",
    ]
    # ... and a key's spaces make a field kubectl's server does not know (found in review: we
    # trimmed them and took `spec.nodeName = n1`).
    for selector, key in (
        ("spec.nodeName = n1", "spec.nodeName "),
        ("metadata.name=a, spec.nodeName=n1", " spec.nodeName"),
    ):
        refused = kube("get", "pods", "--field-selector", selector, "-o", "name")
        assert refused.exit_code == 1 and refused.stdout == "", selector
        assert f'"{key}" is not a known field selector for pods' in refused.stderr
        assert "kubectl keeps the spaces around it" in refused.stderr
    # A term of spaces is no empty term (ParseSelector skips only ""): kubectl's words.
    blank = kube("get", "pods", "--field-selector", "metadata.name=a, ,spec.nodeName=n1")
    assert blank.exit_code == 1 and "can't understand ' '" in blank.stderr


# -- 3. the order of keys in -o json|yaml -----------------------------------------------------


def keys_in_order(text: str) -> list[list[str]]:
    """Every JSON object's keys in ``text``, in the order written."""
    found: list[list[str]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found.append([key for key, _ in pairs])
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return found


def test_json_writes_every_objects_keys_sorted_as_kubectl(backend, kube):
    # kubectl get prints unstructured objects: Go maps, which encoding/json writes sorted
    # (metadata.creationTimestamp before name; byte order: App, a-1, app, app10, app2, zone).
    # Found in review: ours kept the order we built them in (name, namespace, uid, ...).
    for args in (("pod", "a"), ("pods",), ("nodes",)):
        written = keys_in_order(ok(kube("get", *args, "-o", "json")))
        assert all(keys == sorted(keys) for keys in written), written
    one = ok(kube("get", "pod", "a", "-o", "json"))
    assert keys_in_order(one)[0] == sorted(LABELS)
    assert list(json.loads(one)["metadata"]["labels"]) == [
        "App",
        "a-1",
        "app",
        "app10",
        "app2",
        "zone",
    ]


def test_yaml_writes_keys_in_go_yamls_order_as_kubectl(backend, kube):
    # sigs.k8s.io/yaml's go-yaml v2 sorts a map's keys its own way (sorter.go keyList.Less):
    # digit runs by value, a non-letter before a letter (app2 before app10, unlike JSON).
    output = ok(kube("get", "pod", "a", "-o", "yaml"))
    document = yaml.safe_load(output)  # (PyYAML keeps the order written)

    def mappings(value: Any) -> list[dict[str, Any]]:
        if isinstance(value, list):
            return [m for item in value for m in mappings(item)]
        if not isinstance(value, dict):
            return []
        return [value, *(m for item in value.values() for m in mappings(item))]

    labels = document["metadata"]["labels"]
    assert list(labels) == ["App", "a-1", "app", "app2", "app10", "zone"]
    for mapping in mappings(document):
        if mapping is not labels:  # plain words: go-yaml's order is byte order
            assert list(mapping) == sorted(mapping), list(mapping)
    if shutil.which("kubectl"):  # kubectl's own -o yaml of our -o json: the same text
        theirs = subprocess.run(
            ["kubectl", "label", "--local", "-f", "-", "a-1-", "-o", "yaml"],
            input=ok(kube("get", "pod", "a", "-o", "json")),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert theirs == output.replace("    a-1: d\n", "")


# What kubectl v1.37's -o yaml wrote for a map with these keys, whatever their order in the
# object (a set go-yaml's keyList.Less orders consistently: a1b, a9 and a10 it does not, and
# kubectl then writes them in a different order from run to run).
KUBECTL_YAML_ORDER = [
    *("App", "a-1", "a_", "a1", "a1-", "a1-b", "a1.b", "a1b", "a01", "a001", "a9", "aZ"),
    *("app", "app2", "app10", "b00", "b0c", "e", "q", "x.y", "x/y", "z", "é"),
]


def test_go_yaml_key_order_is_kubectls():
    from schedcache.cli.yamltext import go_yaml_ordered

    for shift in range(len(KUBECTL_YAML_ORDER)):
        keys = KUBECTL_YAML_ORDER[shift:] + KUBECTL_YAML_ORDER[:shift]
        ordered = go_yaml_ordered({"data": {key: "v" for key in reversed(keys)}})
        assert list(ordered["data"]) == KUBECTL_YAML_ORDER


# -- 4. how a selected map or list prints -----------------------------------------------------


def test_custom_columns_print_maps_and_lists_as_go_and_jsonpath_as_json(backend, kube):
    # kubectl's custom columns print a cell with fmt.Sprint (map[k:v ...], [a b]); its jsonpath
    # with json.Marshal (compact, keys sorted). Found in review: both printed Python's
    # json.dumps ({"key": "t0", ...}, in the order built).
    columns = "custom-columns=FIRST:.spec.tolerations[0],KEYS:.spec.tolerations[*].key"
    assert ok(kube("get", "pod", "c", "-o", columns)).splitlines() == [
        "FIRST" + " " * 43 + "KEYS",
        "map[effect:NoSchedule key:t0 operator:Exists]   t0,t1",
    ]
    listed = ok(kube("get", "pod", "b", "-o", "custom-columns=ALL:.spec.tolerations"))
    assert listed.splitlines()[1] == "[map[effect:NoSchedule key:t0 operator:Exists]]"
    template = 'jsonpath={.spec.tolerations}{"\\n"}{.metadata.labels}'
    assert ok(kube("get", "pod", "a", "-o", template)).splitlines() == [
        '[{"effect":"NoSchedule","key":"t0","operator":"Exists"},'
        '{"effect":"NoSchedule","key":"t1","operator":"Exists"}]',
        '{"App":"up","a-1":"d","app":"web","app10":"x","app2":"y","zone":"z1"}',
    ]


def test_go_json_escapes_html_as_go():
    from schedcache.cli.jsonpath import go_json, go_text

    assert go_json({"b": "<&>", "a": [1, None, True]}) == (
        '{"a":[1,null,true],"b":"\\u003c\\u0026\\u003e"}'
    )
    assert go_text({"b": None, "a": [False, 2]}) == "map[a:[false 2] b:<nil>]"


# -- 5. narrow columns ------------------------------------------------------------------------


def test_a_narrow_column_is_as_wide_as_kubectls_tabwriter_makes_it(backend, kube):
    # kubectl get writes tables through a tabwriter of minwidth 6, padding 3: a column of one
    # letter is followed by five spaces, not three (seen: `kubectl get pods -o
    # custom-columns=N:.metadata.name,C:...` prints `N     C`).
    narrow = "custom-columns=N:.metadata.name,K:.kind"
    assert ok(kube("get", "pods", "-o", narrow)).splitlines() == [
        "N     K",
        "a     Pod",
        "b     Pod",
        "c     Pod",
    ]
    quiet = ok(kube("get", "pods", "--no-headers", "-o", narrow))
    assert quiet == "a     Pod\nb     Pod\nc     Pod\n"


# -- 6. -o json's characters, a refused field selector, values kubectl cannot sort ------------

# Text kubectl's -o json (json.MarshalIndent) writes as UTF-8, but for <, > and & (\u003c ...)
# and U+2028/U+2029 (\u2028), which Go's encoder always escapes.
WORDS = "café 日本 😀 <b>&</b> \u2028"
WORDS_AS_KUBECTL = '"café 日本 😀 \\u003cb\\u003e\\u0026\\u003c/b\\u003e \\u2028"'


def kubectl_relabelled(manifest: str, label: str, output: str) -> str:
    """kubectl's own printing of ``manifest`` (``label --local``: nothing sent anywhere)."""
    return subprocess.run(
        ["kubectl", "label", "--local", "-f", "-", label, "-o", output],
        input=manifest,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=True,
    ).stdout


def test_json_writes_text_as_utf8_as_kubectl(backend, client, cache_name, monkeypatch, tmp_path):
    # Found in review: -o json wrote "caf\u00e9" (json.dumps' ensure_ascii), where kubectl
    # (cli-runtime's JSONPrinter, json.MarshalIndent) writes UTF-8.
    accented = pod("d", 0, note="café")
    accented["spec"]["nodeSelector"] = {"words": WORDS, "bidi": "a\u202eb"}
    run = loaded_cli(
        {"kind": "List", "items": [NODE, accented]}, client, cache_name, monkeypatch, tmp_path
    )
    one = ok(run("get", "pod", "d", "-o", "json"))
    assert '"note": "café"' in one
    assert f'"words": {WORDS_AS_KUBECTL}' in one
    # What printable() escapes stays a JSON escape (the same string): kubectl writes it raw.
    assert '"bidi": "a\\u202eb"' in one
    assert json.loads(one)["spec"]["nodeSelector"] == {"words": WORDS, "bidi": "a\u202eb"}
    listed = ok(run("get", "pods", "-o", "json"))
    assert '"note": "café"' in listed and f'"words": {WORDS_AS_KUBECTL}' in listed
    # -o jsonpath prints a map as Go's json.Marshal, so the same way, compact.
    selector = ok(run("get", "pod", "d", "-o", "jsonpath={.spec.nodeSelector}"))
    assert selector == '{"bidi":"a\\u202eb","words":' + WORDS_AS_KUBECTL + "}"
    if shutil.which("kubectl"):  # kubectl's own -o json of our -o json: the same text
        theirs = kubectl_relabelled(one, "absent-", "json")
        assert theirs == one.replace("\\u202e", "\u202e")


def test_an_unknown_field_selector_fails_with_status_1_as_kubectl(backend, kube):
    # kubectl sends --field-selector as it is; the API server answers 400 BadRequest ("field
    # label not supported: spec.hostIP") and kubectl exits 1. Found in review: exit status 2,
    # a usage error with click's usage lines.
    for kind, field in (("pods", "spec.hostIP"), ("nodes", "spec.podCIDR")):
        refused = kube("get", kind, "--field-selector", f"{field}=x", "-o", "name")
        assert refused.stdout == ""
        line = failed(refused, f'"{field}" is not a known field selector for {kind}: only ')
        assert "Usage:" not in refused.stderr, line
    # The selector's syntax is the server's to judge too: the same status.
    failed(kube("get", "pods", "--field-selector", "spec.nodeName"), "can't understand")


# What kubectl v1.37.1 printed (after klog's "F1201 07:24:49.460075 5033 sorter.go:329] ",
# exit status 1), run against a stub API server serving these shapes: -o json|yaml|name|
# jsonpath|custom-columns sort unstructured objects; a table sorts its rows' parsed values.
UNSORTABLE = "Field {.spec.tolerations} in *unstructured.Unstructured is an unsortable type: "
UNSORTABLE_ROWS = "Field {.spec.tolerations} in [][][]reflect.Value is an unsortable type: "


@pytest.mark.parametrize("output", [[], ["-o", "name"], ["-o", "json"], ["-o", "wide"]])
def test_sort_by_a_map_or_a_list_fails_as_kubectl(backend, kube, output):
    # kubectl's isLess compares strings, numbers of one type and nulls: a map or a list is
    # "unsortable type". Found in review: ours compared their JSON text and printed, exit 0.
    table = not output or output == ["-o", "wide"]
    prefix = UNSORTABLE_ROWS if table else UNSORTABLE
    lists = kube("get", "pods", "--sort-by", ".spec.tolerations", *output)
    assert lists.stdout == ""
    failed(lists, prefix + "interface, err: unsortable type: []interface {}")
    maps = kube("get", "pods", "--sort-by", "spec.tolerations[0]", *output)
    assert maps.stdout == ""
    failed(maps, "{.spec.tolerations[0]} in ", "unsortable type: map[string]interface {}")
    # One object with a map is never compared (b and c have no labels): no error, as kubectl.
    one_map = ok(kube("get", "pods", "--sort-by", ".metadata.labels", "-o", "name"))
    assert one_map.split() == ["pod/b", "pod/c", "pod/a"]


def test_sort_by_refuses_what_kubectls_isless_refuses():
    import click

    from schedcache.cli.printing import sort_by

    def error(*values: object) -> str:
        documents = [{"v": value} for value in values]
        with pytest.raises(click.ClickException) as refused:
            sort_by(documents, ".v")
        return str(refused.value.message).split("err: ")[1]

    assert error(True, False) == "unsortable type: bool"
    assert error("a", 1) == "unsortable interface: interface"
    assert error(1, 1.5) == "unsortable interface: interface"  # int64 and float64
    # The first pair Go's insertion sort compares: the later value is isLess's first.
    assert error({"a": 1}, "x") == "unsortable interface: interface"
    assert error("x", {"a": 1}) == "unsortable type: map[string]interface {}"
    # Missing first, then null (a nil is less than any value), then the values.
    documents: list[dict[str, object]] = [{"v": "b"}, {"v": None}, {}, {"v": "a"}]
    assert sort_by(documents, ".v") == [2, 1, 3, 0]
    assert sort_by([{"v": 2}, {"v": 10}, {"v": None}], "v") == [2, 0, 1]


# What kubectl v1.37.1 printed for `kubectl get pods -l 'a b' --field-selector ' x=y '`
# against a stub API server answering 400 BadRequest (message "SERVERMSG"), exit status 1:
# kubectl sends the selectors trimmed, unparsed, and words the refusal in cli-runtime's
# EnhanceListError.
KUBECTL_LABEL_REFUSAL = (
    'Error from server (BadRequest): Unable to find "/v1, Resource=pods" that match label '
    'selector "a b", field selector "x=y": SERVERMSG'
)


def test_a_label_selector_that_does_not_parse_fails_with_status_1_as_kubectl(backend, kube):
    # Found in review: a usage error, exit status 2, with click's usage lines.
    kubectls = KUBECTL_LABEL_REFUSAL.removeprefix("Error from server (BadRequest): ")
    kubectls = kubectls.removesuffix("SERVERMSG")
    refused = kube("get", "pods", "-l", " a b ", "--field-selector", " x=y ", "-o", "name")
    assert refused.stdout == ""
    line = failed(refused)
    assert "Usage:" not in refused.stderr
    # The label selector is the server's to refuse first, as kubectl's ListOptions decode it.
    assert line.startswith("Error: " + kubectls), line
    for kind, selector in (("pods", "!!"), ("nodes", "a=b,"), ("pods", "x in ()")):
        line = failed(kube("get", kind, "-l", selector), f"Resource={kind}")
        assert f'label selector "{selector}", field selector "": ' in line, line
    # Go-quoted as kubectl quotes it: a terminal's escape is \x1b, never the character.
    controls = failed(kube("get", "pods", "-A", "-l", "a=\x1b[2J"), 'selector "a=\\x1b[2J"')
    assert "\x1b" not in controls


# What kubectl v1.37.1's -o yaml (`kubectl label --local -o yaml`, go-yaml v2) wrote for these
# strings: text in UTF-8, a string with a character above U+FFFF (or a BOM, a tab) double-quoted
# with YAML's escapes.
YAML_AS_KUBECTL = {
    "café": "café",
    "日本 ñ": "日本 ñ",
    "😀": '"\\U0001F600"',
    "a\ufeffb": '"a\\uFEFFb"',
    "é\tb": '"é\\tb"',
    'é"\\': 'é"\\',
    "\u00a0x": "\u00a0x",
}


def test_yaml_writes_text_as_utf8_as_kubectl(backend, client, cache_name, monkeypatch, tmp_path):
    # Found in review: -o yaml wrote "caf\xE9" (PyYAML without allow_unicode), where kubectl
    # writes café.
    texts = pod("d", 0, app="web", drop="me")
    texts["spec"]["nodeSelector"] = {f"k{i}": text for i, text in enumerate(YAML_AS_KUBECTL)}
    unsafe = pod("e", 0)
    unsafe["spec"]["nodeSelector"] = {"bidi": "é\u202eb", "c1": "a\x85b", "ls": "a\u2028b"}
    run = loaded_cli(
        {"kind": "List", "items": [NODE, texts, unsafe]}, client, cache_name, monkeypatch, tmp_path
    )
    output = ok(run("get", "pod", "d", "-o", "yaml"))
    for i, written in enumerate(YAML_AS_KUBECTL.values()):
        assert f"    k{i}: {written}\n" in output, (written, output)
    assert yaml.safe_load(output)["spec"]["nodeSelector"] == texts["spec"]["nodeSelector"]
    assert "caf\\xE9" not in ok(run("get", "pods", "-o", "yaml"))
    # What printable() escapes stays a YAML escape in double quotes (the same string), the one
    # difference: kubectl writes a bidi override raw, U+2028 raw in single quotes, and U+0085
    # as a space (it reads its own JSON back as YAML).
    escaped = ok(run("get", "pod", "e", "-o", "yaml"))
    assert '    bidi: "é\\u202Eb"\n    c1: "a\\Nb"\n    ls: "a\\Lb"\n' in escaped
    assert yaml.safe_load(escaped)["spec"]["nodeSelector"] == unsafe["spec"]["nodeSelector"]
    if shutil.which("kubectl"):  # kubectl's own -o yaml of our -o json: the same text
        theirs = kubectl_relabelled(ok(run("get", "pod", "d", "-o", "json")), "drop-", "yaml")
        assert theirs == output.replace("    drop: me\n", "")


def test_yaml_never_writes_what_printable_escapes():
    # The one difference from kubectl's -o yaml, kept: characters printable() escapes (C1, DEL,
    # format characters, private-use, unassigned, noncharacters, separators) are escapes in
    # double quotes, in values and keys; printable text around them stays UTF-8.
    from schedcache.cli.text import unprintable
    from schedcache.cli.yamltext import yaml_text

    for char in "\x80\x9f\x7f\xad\u200b\u200d\u2066\u202e\ue000\u0378\ufdd0\ufffe\U000e0041":
        document = {f"k{char}": f"é{char}", "plain": f"x{char}"}
        text = yaml_text(document)
        assert yaml.safe_load(text) == document, repr(char)
        assert "é" in text and char not in text, (repr(char), text)
        assert not any(unprintable(c) for c in text if c != "\n")
