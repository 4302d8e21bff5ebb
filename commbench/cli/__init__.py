"""The command line: `commbench [run] OPTIONS` and `commbench sweep FILE.yaml` benchmark; compare, plot
and report read saved results; pattern, replay and fabric run the features; list and env describe this
machine. ``main`` (main.py) is the entry point.

Importing the command line takes seconds on a busy machine (every feature registers): a Ctrl-C during
those seconds exits 130, as one during a run does, instead of printing the import's traceback.
"""

import signal

try:
    from commbench.cli.main import cli, main
except KeyboardInterrupt:
    raise SystemExit(128 + signal.SIGINT) from None

__all__ = ["cli", "main"]
