"""Kinds of result: what a feature's rows bring to the console, plot, report and compare.

A sweep's rows need nothing here: the writers and the commands on saved runs handle them. A feature
whose rows mean more than a row each (fabric's matrices and verdict, a pattern's step breakdown, a
replay's passes) has a ``ResultKind`` under the ``Row.pattern`` its rows carry, defined in a module of
its own (``fabric/kind.py``, ``patterns/kind.py``, ``replay/kind.py``) and registered with the feature
(running/features.py); the command line imports every feature's registration before a command runs.
The console, plot, report and compare look kinds up here and never import a feature (pytest's hooks,
pluggy's plugins: the core defines the plug, the features fill it).

Invariants: registering is idempotent per name only for the same object (a second, different kind of
one name is an error); looking up an unregistered pattern finds nothing, and its rows are shown as a
sweep's (a file from a newer commbench still loads and prints).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from commbench.errors import UsageError
from commbench.results.model import Row
from commbench.results.saved import SavedRun


@dataclass(frozen=True)
class LiveRun:
    """What the console knows of the run whose rows it prints: the ranks' host names, the first
    benchmark's configuration as recorded (meta.config) and each host's hardware record (meta.hardware)."""

    hostnames: list[str] = field(default_factory=list)
    config: Mapping[str, Any] = field(default_factory=dict)
    hardware: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ResultKind:
    """How one kind of result shows. Each part is optional: None leaves that command's ordinary
    handling (the sweep table, busbw and latency plots, the run-by-run report)."""

    name: str  # the Row.pattern of its rows
    # the console at the end of a table: print these rows (one run's, as they were measured)
    console: Callable[[Console, list[Row], LiveRun], None] | None = None
    # plot: a figure of these runs (each holds rows of this kind); UsageError when they cannot be drawn
    figure: Callable[[list[SavedRun]], Any] | None = None
    # report: the whole page for these runs, given why plots are missing (None: they are not)
    report_page: Callable[[list[SavedRun], str | None], str] | None = None
    compares_alone: bool = False  # compare: its results compare only with results of the same kind


_KINDS: dict[str, ResultKind] = {}


def register_kind(kind: ResultKind) -> ResultKind:
    """Add a kind (its name must be new, or this very kind again) and return it."""
    known = _KINDS.get(kind.name)
    if known is not None and known is not kind:
        raise ValueError(f"result kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def kind_named(pattern: str) -> ResultKind | None:
    """The kind registered for rows with this ``Row.pattern`` ('' and unknown patterns: None)."""
    return _KINDS.get(pattern) if pattern else None


def kinds_of(run: SavedRun) -> list[ResultKind]:
    """The registered kinds among a run's rows, in the order they first appear."""
    found = dict.fromkeys(kind for kind in map(kind_named, (row.pattern for row in run.rows)) if kind)
    return list(found)


def drawing_kind(runs: list[SavedRun]) -> ResultKind | None:
    """The kind whose figure replaces the ordinary plot of these runs (None: the ordinary plot)."""
    return _own_kind(runs, [kind for run in runs for kind in kinds_of(run) if kind.figure is not None])


def page_kind(runs: list[SavedRun]) -> ResultKind | None:
    """The kind whose page replaces the ordinary report; UsageError when its results are mixed with
    results of another kind (they go in separate reports)."""
    kind = _own_kind(runs, [kind for run in runs for kind in kinds_of(run) if kind.report_page is not None])
    if kind is not None and not all(kind in kinds_of(run) for run in runs):
        raise UsageError(f"report: {kind.name} results and sweep results go in separate reports")
    return kind


def check_comparable(runs: list[SavedRun]) -> None:
    """compare: UsageError when a result of a kind that compares alone meets a result of another kind."""
    for run in runs:
        for kind in kinds_of(run):
            if kind.compares_alone and not all(kind in kinds_of(other) for other in runs):
                raise UsageError(f"{run.path} is a {kind.name} result: compare it with another {kind.name} "
                                 "result, not with a sweep")


def _own_kind(runs: list[SavedRun], kinds: list[ResultKind]) -> ResultKind | None:
    distinct = list(dict.fromkeys(kinds))
    if len(distinct) > 1:
        names = " and ".join(kind.name for kind in distinct)
        raise UsageError(f"{names} results cannot be shown together; give one kind at a time")
    return distinct[0] if distinct else None
