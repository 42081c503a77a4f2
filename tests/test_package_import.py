"""``import schedcache`` imports its public names on first use (PEP 562), so the command line
answers a Ctrl-C from its first moment; what the package offered when it imported everything at
once must still be there. Each check runs in a fresh interpreter: this one has it all loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_package_loads_neither_redis_nor_the_cache():
    loaded = python(
        "import sys, schedcache; print('redis' in sys.modules, 'schedcache.cache' in sys.modules)"
    )
    assert loaded == "False False"


def test_every_public_name_and_subpackage_is_there_after_a_bare_import():
    # Found in review (stop 58, mended): schedcache.store.connection.EMBEDDED raised
    # AttributeError after `import schedcache`, which the eager package had imported.
    assert python("import schedcache; print(schedcache.store.connection.EMBEDDED)") == "embedded"
    code = (
        "import schedcache\n"
        "assert all(getattr(schedcache, name) is not None for name in schedcache.__all__)\n"
        "from schedcache import *\n"
        "print(schedcache.Cache.__module__, Pod.__name__)"
    )
    assert python(code) == "schedcache.cache Pod"


def test_dir_lists_the_public_names_and_an_unknown_name_is_an_attribute_error():
    code = (
        "import schedcache\n"
        "names = sorted(n for n in dir(schedcache) if not n.startswith('__'))\n"
        "print(names == sorted(schedcache.__all__))\n"
        "try:\n    schedcache.nosuch\nexcept AttributeError as error:\n    print(error)"
    )
    assert python(code).splitlines() == ["True", "module 'schedcache' has no attribute 'nosuch'"]


def test_the_cli_module_still_offers_clicks_group_as_main():
    code = (
        "import click, schedcache.cli as cli\n"
        "print(isinstance(cli.main, click.Group), callable(cli.run))\n"
        "try:\n    cli.mian\nexcept AttributeError as error:\n    print(error)"
    )
    assert python(code).splitlines() == [
        "True True",
        "module 'schedcache.cli' has no attribute 'mian'",
    ]
