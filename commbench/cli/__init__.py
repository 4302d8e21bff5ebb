"""The command line: `commbench [run] OPTIONS` and `commbench sweep FILE.yaml` benchmark; compare, plot
and report read saved results; pattern, replay and fabric run the features; list and env describe this
machine. ``main`` (main.py) is the entry point.
"""

from commbench.cli.main import cli, main

__all__ = ["cli", "main"]
