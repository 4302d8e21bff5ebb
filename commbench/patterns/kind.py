"""The workload patterns' result kinds (results/kinds.py), registered with each pattern (command.py):
FSDP's rows end their run on the console with the tables of tables.py, an activation pattern's with
those of parallel_tables.py, each printed whole (a table wider than the console is never cut); saved,
they plot, report and compare as any rows do.
"""

from functools import partial

from rich.console import Console
from rich.table import Table

from commbench.patterns.config import FSDP
from commbench.patterns.parallel_tables import parallel_tables
from commbench.patterns.tables import fsdp_tables
from commbench.results.kinds import LiveRun, ResultKind
from commbench.results.model import Row
from commbench.writers.console import print_whole


def _print(console: Console, renderable: Table | str) -> None:
    if isinstance(renderable, Table):
        print_whole(console, renderable)
    else:
        console.print(renderable)


def print_fsdp_rows(console: Console, rows: list[Row], run: LiveRun) -> None:
    for renderable in fsdp_tables(rows):
        _print(console, renderable)


def print_activation_rows(pattern: str, console: Console, rows: list[Row], run: LiveRun) -> None:
    own = [row for row in rows if row.pattern == pattern]
    for renderable in parallel_tables(own) if own else []:
        _print(console, renderable)


FSDP_KIND = ResultKind(name=FSDP, console=print_fsdp_rows)


def activation_kind(pattern: str) -> ResultKind:
    """The kind of an activation pattern's rows (Row.pattern ``pattern``)."""
    return ResultKind(name=pattern, console=partial(print_activation_rows, pattern))
