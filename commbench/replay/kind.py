"""Replay's result kind (results/kinds.py): a replay's rows print no table when their run ends, since
the replay closes with a summary of its own (replay/summary.py); saved, they plot, report and compare as
any rows do.
"""

from rich.console import Console

from commbench.replay.model import PATTERN
from commbench.results.kinds import LiveRun, ResultKind
from commbench.results.model import Row


def no_table(console: Console, rows: list[Row], run: LiveRun) -> None:
    """The summary lines the replay prints stand for its table."""


REPLAY = ResultKind(name=PATTERN, console=no_table)  # registered with the replay feature (command.py)
