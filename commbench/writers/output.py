"""Where rows go as they are measured: the one protocol every producer (a sweep, a pattern, ...) writes
to, and the null sink of the ranks that do not record.

Rank 0 gets a recording output (recording.RecordingOutput: the files, then the console); every other
rank gets ``NullOutput``. A producer calls ``plan`` once, ``working`` before each point, ``row`` as each
row is measured (``batch`` for rows measured together, such as a fabric round's: one sync of the files),
``note`` for anything worth a line, ``table_done`` with the rows of each table,
``implementations_done`` with the rows of tables that differ only by implementation, ``passes_done``
with every pass's rows when a soak's passes are all in, ``section`` for a named part of results.json
beside the rows (fabric's matrices and suspects), and ``unavailable`` for what a sweep left out
because the backend cannot run it here.
"""

from typing import Protocol

from commbench.results.model import Row


class Output(Protocol):
    def note(self, text: str) -> None: ...

    def plan(self, steps: int) -> None:
        """The run will measure ``steps`` points (a sweep's (size, mode) pairs)."""

    def working(self, text: str) -> None:
        """Measuring the point described by ``text`` now."""

    def row(self, row: Row) -> None: ...

    def batch(self, rows: list[Row]) -> None:
        """Rows measured together, written at once (one sync of the files for all)."""

    def table_done(self, rows: list[Row]) -> None:
        """The rows of one table (a collective, dtype, op and placement; a pattern's run) are all in."""

    def implementations_done(self, rows: list[Row]) -> None:
        """The tables of one collective, dtype, op and placement by several implementations are all in
        (``rows``: theirs, in order): to show them side by side."""

    def passes_done(self, rows: list[Row]) -> None:
        """A soak's passes (--repeat, --duration) are all in: ``rows``, every pass's, to summarise."""

    def section(self, name: str, payload: dict) -> None:
        """Write ``payload`` as the part ``name`` of results.json, replacing an earlier one."""

    def unavailable(self, reasons: dict[str, str]) -> None:
        """Collectives the run left out because the backend cannot run them here, each with why
        (results.json's ``meta["unavailable"]``)."""


class NullOutput:
    """The ranks other than 0: measured rows go nowhere (rank 0 records them)."""

    def note(self, text: str) -> None:
        pass

    def plan(self, steps: int) -> None:
        pass

    def working(self, text: str) -> None:
        pass

    def row(self, row: Row) -> None:
        pass

    def batch(self, rows: list[Row]) -> None:
        for row in rows:
            self.row(row)

    def table_done(self, rows: list[Row]) -> None:
        pass

    def implementations_done(self, rows: list[Row]) -> None:
        pass

    def passes_done(self, rows: list[Row]) -> None:
        pass

    def section(self, name: str, payload: dict) -> None:
        pass

    def unavailable(self, reasons: dict[str, str]) -> None:
        pass
