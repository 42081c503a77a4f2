"""The README's API example runs as written and shows what it claims."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_api_example_runs_and_matches_its_comments(capsys):
    bound = []
    namespace: dict = {"bound_pods": [], "bind": bound.append}
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "pod default/web-0 (uid 9f1c) is already added on node node-1" in printed
    info = namespace["info"]
    assert (info.requested.milli_cpu, info.non_zero_requested.memory, info.used_ports) == (
        250,
        268435456,
        {("0.0.0.0", "TCP", 8080)},
    )
    cache = namespace["cache"]
    assert [e.type for e in cache.events()][:4] == [
        "NodeAdded",
        "PodAssumed",
        "BindingFinished",
        "PodAdded",
    ]
    # The scheduling cycle placed web-0 again, on the only node, assumed and bound.
    assert [pod.name for pod in bound] == ["web-0"]
    assert cache.is_assumed_pod(bound[0]) and bound[0].node_name == "node-1"
    assert namespace["snap"].generation < cache.generation()
