"""Soak: repeat a run until a duration has passed (or a number of passes), every row stamped with when
it was measured.

Invariants: rank 0's clock decides. Each pass runs to its end on every rank, then rank 0 says whether
time is left and every rank follows its answer, so no rank starts a pass the others skip. At least one
pass runs; a pass starts only while time is left (and fewer than ``passes`` have run), so the last may
end after the duration. Rows reach the output as they are measured (a pass never holds them back), so
an interrupted soak keeps every row it measured. A row's ``elapsed_s`` is seconds from the soak's start
to the moment it reached the output, on that rank's clock; ``repeat`` is its pass, from 0.
"""

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from commbench.results.model import Row

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.writers.output import Output

class StampedOutput:
    """Passes everything on to ``inner``; each row first gets ``elapsed_s`` and ``repeat``, and a copy is
    kept in ``rows`` (the stamped rows, in the order they arrived)."""

    def __init__(self, inner: "Output", started: float) -> None:
        self.inner = inner
        self.started = started
        self.repeat = 0
        self.rows: list[Row] = []

    def row(self, row: Row) -> None:
        self.inner.row(self._stamped([row])[0])

    def batch(self, rows: list[Row]) -> None:
        self.inner.batch(self._stamped(rows))

    def _stamped(self, rows: list[Row]) -> list[Row]:
        elapsed = round(time.monotonic() - self.started, 3)
        stamped = [replace(row, elapsed_s=elapsed, repeat=self.repeat) for row in rows]
        self.rows.extend(stamped)
        return stamped

    def note(self, text: str) -> None:
        self.inner.note(text)

    def table_done(self, rows: list[Row]) -> None:
        self.inner.table_done([replace(row, repeat=self.repeat) for row in rows])  # its pass, for its title

    def implementations_done(self, rows: list[Row]) -> None:
        self.inner.implementations_done(rows)

    def passes_done(self, rows: list[Row]) -> None:
        self.inner.passes_done(rows)

    def plan(self, steps: int) -> None:
        self.inner.plan(steps)

    def working(self, text: str) -> None:
        self.inner.working(text)

    def section(self, name: str, payload: dict) -> None:
        self.inner.section(name, payload)

    def unavailable(self, reasons: dict[str, str]) -> None:
        self.inner.unavailable(reasons)


def repeat_until(duration_s: float | None, run_pass: "Callable[[Output], object]", output: "Output",
                 backend: "Backend", after_pass: Callable[[list[Row]], None] | None = None,
                 passes: int | None = None) -> list[Row]:
    """Call ``run_pass(stamped_output)`` again and again until ``duration_s`` seconds have passed on
    rank 0's clock or ``passes`` passes have run (neither given: once); return every stamped row, in
    order. ``after_pass`` gets the rows so far after each pass (to publish a running analysis). Every
    rank must call this together, with the same arguments."""
    stamped = StampedOutput(output, time.monotonic())
    while True:
        run_pass(stamped)
        if after_pass is not None:
            after_pass(list(stamped.rows))
        if passes is not None and stamped.repeat + 1 >= passes:
            return stamped.rows
        if duration_s is None and passes is None:
            return stamped.rows
        if duration_s is not None and not backend.broadcast_object(
                time.monotonic() - stamped.started < duration_s, root=0):
            return stamped.rows
        stamped.repeat += 1
