"""Which of a sweep's collectives this backend can run here, asked of the backend itself before anything
is measured: what a torch lacks is found by trying it, never by its version number.

A collective is available when one tiny op of it (probe.try_op: 2 elements per rank, sync) completes on
every rank in one of the dtype and op combinations the sweep plans for it; the combinations are tried in
order and the first that runs settles it, so a run that can measure what it asks costs one probe per
collective. The ranks agree on each probe's outcome before the next (an all_gather), so they stay in
step and reach the same verdict. What ``--collective all`` brought in and the backend cannot run is left
out and named once (a note, and ``meta["unavailable"]``); a collective named on its own that cannot run
is a UsageError on every rank (rank 0 says it: exit status 2), before anything is measured. A planned
dtype or op that fails while another runs stays an error row, as before: the collective itself runs.
"""

from dataclasses import dataclass, replace

import torch

from commbench.backends.base import Backend
from commbench.config.sweep import RunConfig
from commbench.errors import UsageError
from commbench.measure.collectives import REGISTRY, Collective
from commbench.running.probe import since_note, try_op
from commbench.writers.output import Output

SEE_LIST = "`commbench list` shows what runs here"


def planned_pairs(config: RunConfig, collective: Collective) -> list[tuple[str, str]]:
    """The (dtype, op) combinations the sweep runs ``collective`` in (op '' when it does not reduce)."""
    dtypes = config.dtypes if collective.sized else config.dtypes[:1]
    ops = config.ops if collective.reduces else [""]
    return [(dtype, op) for dtype in dtypes for op in ops]


def agreed_refusal(backend: Backend, collective: Collective, dtype: str, op: str) -> str | None:
    """None when one tiny op ran on every rank, else the first refusing rank's reason (on every rank)."""
    errors = backend.all_gather_object(try_op(backend, collective, dtype, op, "sync"))
    return next((error for error in errors if error is not None), None)


@dataclass(frozen=True)
class Refusal:
    reason: str  # the backend's words
    asked: str = ""  # 'in float8_e4m3fn', 'with op premul_sum': when the plain form would run

    def __str__(self) -> str:
        return f"{self.asked}: {self.reason}" if self.asked else self.reason


def refusal(backend: Backend, config: RunConfig, collective: Collective) -> Refusal | None:
    """Why the backend cannot run ``collective`` here in any combination the sweep plans; None when it
    can. When the plain form (float32, op sum) runs, the refusal names what was asked instead."""
    pairs = planned_pairs(config, collective)
    first_error = None
    for dtype, op in pairs:
        error = agreed_refusal(backend, collective, dtype, op)
        if error is None:
            return None
        first_error = first_error or error
    plain = ("float32", "sum" if collective.reduces else "")
    if plain in pairs or agreed_refusal(backend, collective, *plain) is not None:
        return Refusal(first_error or "")
    return Refusal(first_error or "", _asked(pairs))


def _asked(pairs: list[tuple[str, str]]) -> str:
    dtypes = list(dict.fromkeys(dtype for dtype, _ in pairs))
    ops = list(dict.fromkeys(op for _, op in pairs if op))
    plain_dtype = dtypes == ["float32"]
    return " ".join(part for part in ("" if plain_dtype else f"in {', '.join(dtypes)}",
                                      "" if ops in ([], ["sum"]) else f"with op {', '.join(ops)}") if part)


def torch_release() -> str:
    return torch.__version__.split("+")[0]


def unavailable_collectives(backend: Backend, config: RunConfig) -> dict[str, Refusal]:
    """Each planned collective the backend cannot run here, with why (every rank gets the same)."""
    found = {}
    for name in config.collectives:
        found_refusal = refusal(backend, config, REGISTRY[name])
        if found_refusal is not None:
            found[name] = found_refusal
    return found


def _since(backend: Backend, name: str, why: Refusal) -> str:
    """Where a later torch runs what this one refuses outright (not a dtype or op it refuses)."""
    return "" if why.asked else since_note(backend.name, name)


def named_refusal(backend: Backend, unavailable: dict[str, Refusal]) -> str:
    """The one line for collectives named on their own that cannot run here."""
    said = [f"{name}: {backend.name} on torch {torch_release()} cannot run it"
            f"{' ' + why.asked if why.asked else ''} ({why.reason}){_since(backend, name, why)}"
            for name, why in unavailable.items()]
    return f"{'; '.join(said)} ({SEE_LIST})"


def left_out_note(backend: Backend, unavailable: dict[str, Refusal]) -> str:
    """The one note for what --collective all left out, grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for name, why in unavailable.items():
        by_reason.setdefault(f"{why}{_since(backend, name, why)}", []).append(name)
    parts = [f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()]
    return (f"--collective all: left out what {backend.name} on torch {torch_release()} cannot run here: "
            f"{'; '.join(parts)} ({SEE_LIST})")


def runnable(config: RunConfig, backend: Backend) -> tuple[RunConfig, dict[str, Refusal]]:
    """``config`` with only the collectives the backend can run here, and those it cannot, with why.
    UsageError when one named on its own cannot run, or when nothing is left."""
    unavailable = unavailable_collectives(backend, config)
    if not unavailable:
        return config, {}
    if not config.all_collectives:
        raise UsageError(named_refusal(backend, unavailable))
    left = [name for name in config.collectives if name not in unavailable]
    if not left:
        raise UsageError(f"nothing to measure: {left_out_note(backend, unavailable)}")
    return replace(config, collectives=left), unavailable


def settle(config: RunConfig, backend: Backend, output: Output) -> RunConfig:
    """``config`` with what the backend cannot run here left out, named once (a note and the results'
    meta); a UsageError for one named on its own."""
    kept, unavailable = runnable(config, backend)
    if unavailable:
        name = f"benchmark {config.name!r}: " if config.name else ""
        output.note(name + left_out_note(backend, unavailable))
        output.unavailable({collective: str(why) for collective, why in unavailable.items()})
    return kept
