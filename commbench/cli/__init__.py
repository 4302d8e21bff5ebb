"""The command line: `commbench [run] OPTIONS` and `commbench sweep FILE.yaml` benchmark; compare, plot
and report read saved results; pattern, replay and fabric run the features; list and env describe this
machine. ``main`` is the entry point: it imports the command line (main.py) when called, so that a
Ctrl-C during those seconds of imports exits 130 quietly instead of with an import's traceback.
"""

import signal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commbench.cli.main import cli  # noqa: F401 - the group, imported on first use (__getattr__)

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line (main.main): its exit status; 128 + N for signal N during the imports."""
    try:
        from commbench.cli.main import main as run_command_line
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return run_command_line(argv)


def __getattr__(name: str) -> Any:
    if name == "cli":
        from commbench.cli.main import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
