"""The commands that need no backend answer without importing torch (it costs seconds): help, the file
commands' help, and the usage errors found before any rank starts."""

import re
import subprocess
import sys

import pytest

from tests.dist_helpers import ROOT, launcherless_env

pytestmark = pytest.mark.processes


def _imported_modules(*args: str) -> tuple[int, set[str]]:
    """The exit status of `python -X importtime -m commbench ARGS` and the modules it imported."""
    command = [sys.executable, "-X", "importtime", "-m", "commbench", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=launcherless_env(),
                            cwd=ROOT, stdin=subprocess.DEVNULL)
    modules = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", result.stderr, re.MULTILINE))
    return result.returncode, modules


@pytest.mark.parametrize("args, status", [
    (["--help"], 0),
    (["compare", "--help"], 0),
    (["plot", "--help"], 0),
    (["report", "--help"], 0),
    (["pattern", "fsdp", "--help"], 0),
    (["--collective", "all_reduse"], 2),
    (["--sizes", "1K:abc"], 2),
], ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_commands_without_a_backend_do_not_import_torch(args, status):
    returncode, modules = _imported_modules(*args)
    assert returncode == status
    assert "commbench.cli" in modules  # the measurement saw commbench start
    assert not {name for name in modules if name == "torch" or name.startswith("torch.")}
