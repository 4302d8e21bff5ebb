"""The commands that need no backend answer without importing torch (it costs seconds): help, the file
commands' help, and the usage errors found before any rank starts. A launcher that spawns local ranks
does not import it either: only the fork server its ranks are forked from pays for it, once."""

import json
import re
import subprocess
import sys

import pytest

from tests.dist_helpers import ROOT, launcherless_env

pytestmark = pytest.mark.processes


def _imported_modules(*args: str) -> tuple[int, set[str]]:
    """The exit status of `python -X importtime -m commbench ARGS` and the modules it imported (ranks it
    spawns run without -X importtime: what is listed is the launcher's alone)."""
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
    assert _no_torch(modules)


def _no_torch(modules: set[str]) -> bool:
    return not {name for name in modules if name == "torch" or name.startswith("torch.")}


# The launcher's own modules, said as it exits: its fork server (which preloads torch) and the ranks run
# with the same interpreter flags, so -X importtime would list theirs too.
LAUNCHER = ("import atexit, json, sys\n"
            "atexit.register(lambda: print('launcher modules:', json.dumps(sorted(sys.modules)),\n"
            "                              file=sys.stderr))\n"
            "from commbench.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")


def _launcher_modules(*args: str) -> tuple[int, set[str]]:
    """The exit status of a spawning launcher and the modules it had imported when it exited."""
    result = subprocess.run([sys.executable, "-c", LAUNCHER, *args], capture_output=True, text=True,
                            timeout=240, env=launcherless_env(), cwd=ROOT, stdin=subprocess.DEVNULL)
    said = [line for line in result.stderr.splitlines() if line.startswith("launcher modules: ")]
    assert len(said) == 1, result.stderr  # the launcher's alone: forked ranks skip exit handlers
    return result.returncode, set(json.loads(said[0].split(": ", 1)[1]))


@pytest.mark.parametrize("args", [
    ["--collective", "all_reduce", "--sizes", "1K", "--iters", "1", "--warmup", "0"],
    ["pattern", "fsdp", "--layers", "1", "--iters", "1"],
    ["pattern", "tp", "--layers", "1", "--iters", "1"],
    ["fabric", "--size", "1K", "--iters", "1", "--warmup", "0"],
], ids=lambda value: " ".join(value[:2]))
def test_a_launcher_that_spawns_ranks_does_not_import_torch(args, tmp_path):
    json_path = tmp_path / "run.json"
    returncode, modules = _launcher_modules(*args, "--nproc", "2", "--quiet", "--json", str(json_path),
                                            "--csv", str(tmp_path / "run.csv"))
    assert returncode == 0 and "commbench.running.spawn" in modules
    assert "commbench.coordination.board" in modules  # the board, through the package's public API
    assert _no_torch(modules)
    assert json.loads(json_path.read_text())["rows"]  # the ranks did the work


def test_a_replay_launcher_does_not_import_torch(tmp_path, recordings):
    ddp = recordings.recording("ddp").directory
    json_path = tmp_path / "replay.json"
    files = ["--json", str(json_path), "--csv", str(tmp_path / "r.csv")]
    returncode, modules = _launcher_modules("replay", str(ddp), "--select", "last:1", "--iters", "1",
                                            "--quiet", *files)
    assert returncode == 0 and "commbench.running.spawn" in modules
    assert _no_torch(modules)
    assert json.loads(json_path.read_text())["rows"]


# Which modules the coordination package has imported: after the launcher's names, then after a rank's.
SIDES = ("import json, sys\n"
         "from commbench.coordination import BOARD_ENV, LauncherBoard, Waiter\n"
         "print(json.dumps(sorted(sys.modules)))\n"
         "from commbench.coordination import StartUp\n"
         "from commbench.coordination.startup import StartUp as defined\n"
         "assert StartUp is defined\n"
         "print(json.dumps(sorted(sys.modules)))\n")


def test_the_coordination_package_imports_torch_only_for_the_ranks_side():
    result = subprocess.run([sys.executable, "-c", SIDES], capture_output=True, text=True, timeout=120,
                            env=launcherless_env(), cwd=ROOT, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    launcher_side, ranks_side = (set(json.loads(line)) for line in result.stdout.splitlines())
    assert "commbench.coordination.board" in launcher_side and _no_torch(launcher_side)
    assert "torch.distributed" in ranks_side
