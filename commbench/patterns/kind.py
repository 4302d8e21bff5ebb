"""The workload patterns' result kinds (results/kinds.py): FSDP's and the activation patterns' rows end
their run on the console with the tables of patterns/tables.py; saved, they plot, report and compare as
any rows do.
"""

from rich.console import Console

from commbench.patterns.fsdp_config import PATTERN as FSDP
from commbench.patterns.parallel import PATTERNS
from commbench.patterns.tables import pattern_tables
from commbench.results.kinds import LiveRun, ResultKind, register_kind
from commbench.results.model import Row


def print_pattern_rows(console: Console, rows: list[Row], run: LiveRun) -> None:
    for renderable in pattern_tables(rows):
        console.print(renderable)


PATTERN_KINDS = tuple(register_kind(ResultKind(name=name, console=print_pattern_rows))
                      for name in (FSDP, *PATTERNS))
