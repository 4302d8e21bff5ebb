"""`commbench fabric` on the ranks: set up once, measure pass after pass, conclude, and exit accordingly.

Every rank measures and gathers every other rank's times; rank 0 alone builds the rows, records them
and analyses them, and its conclusions (what to confirm, the suspects) are broadcast, so all confirm
together (fabric/confirm.py) and exit with one status (the other ranks keep no rows: a full pass has
2N(N-1)). The
`fabric` part of results.json is rewritten after every pass, so an interrupted soak leaves the analysis
of the passes it finished; once every row is in, the run is one table (Output.table_done), which the
console shows as the matrices and the verdict (fabric.tables; an interrupted run shows those of the
rows so far).
"""

import os
import sys
from functools import partial

from commbench.backends.base import Backend
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.fabric.analysis import FabricAnalysis, analyse, crowded_hosts, suspects_of
from commbench.fabric.config import FabricConfig, Outcome
from commbench.fabric.confirm import CONFIRMATIONS, RECHECK, ConfirmationPlan, plan_confirmation
from commbench.fabric.kind import FABRIC  # the `fabric` part of results.json is named after it
from commbench.fabric.measure import (
    FabricContext,
    allocate_buffers,
    measure_nodes,
    measure_rounds,
    node_groups,
)
from commbench.fabric.schedule import make_schedule
from commbench.results.model import Row
from commbench.running.runner import Session
from commbench.running.soak import repeat_until
from commbench.writers.output import Output


def _summary(ctx: FabricContext) -> str:
    config, hosts = ctx.config, len(set(ctx.hostnames))
    soak = soak_text(config.launch.duration_s, config.launch.passes)
    return (f"fabric: {ctx.schedule.describe(config.serial)} on {plural(hosts, 'host')}; "
            f"bandwidth at {format_size(config.size)}, latency at {format_size(config.latency_size)}, "
            f"{config.warmup} warm-up and {config.iters} timed messages per direction{soak}")


def soak_text(duration_s: float | None, passes: int | None) -> str:
    """How long the soak repeats, as the summary says it ('' without one)."""
    if duration_s and passes:
        return f"; soak: {duration_s:g} s or {passes} passes, whichever comes first"
    if duration_s:
        return f"; soak: passes for {duration_s:g} s (the last one started in time runs to its end)"
    return f"; soak: {plural(passes, 'pass')}" if passes else ""


def run_fabric(configs: list[FabricConfig], backend: Backend, output: Output, session: Session,
               outcome: Outcome | None = None) -> list[Row]:
    """The work launch runs on every rank (commbench.running.launch.Work); every row, stamped."""
    (config,) = configs
    hostnames = list(session.hostnames)
    buffers = allocate_buffers(backend, config, hostnames)
    schedule = make_schedule(hostnames, config.sample)
    ctx = FabricContext(backend, config, hostnames, schedule, buffers, node_groups(backend, hostnames),
                        session, crowded_hosts(hostnames, _usable_cpus(backend, hostnames)))
    output.note(_summary(ctx))
    if ctx.latency_alone:
        output.note("a host has more ranks than CPUs: ping-pongs run one pair at a time, since concurrent "
                    "ones would time the wait for a CPU (bandwidth is still measured a round at a time)")
    if config.launch.duration_s is None and config.launch.passes is None:
        output.plan(4 * schedule.pair_count + len(ctx.nodes.intra) + len(ctx.nodes.inter))

    def publish(rows: list[Row]) -> None:
        if backend.rank == 0:
            output.section(FABRIC.name, analyse(rows, hostnames, config.slow_factor, ctx.crowded).to_dict())

    rows = repeat_until(config.launch.duration_s, partial(fabric_pass, ctx), output, backend,
                        after_pass=publish, passes=config.launch.passes)
    output.table_done(rows)
    analysis = analyse(rows, hostnames, config.slow_factor, ctx.crowded) if backend.rank == 0 else None
    suspects = [suspect.name for suspect in analysis.suspects] if analysis is not None else None
    if outcome is not None:  # rank 0's verdict, so that every rank exits with the status it printed
        outcome.suspects = backend.broadcast_object(suspects, root=0)
    if analysis is not None:
        _fail_on_outlier_line(config, analysis)
    return rows


def _usable_cpus(backend: Backend, hostnames: list[str]) -> dict[str, int]:
    """Each host's usable CPUs as its first rank sees them (its affinity: what the run's hardware record
    of the host says), on every rank; none on GPUs, whose times do not wait for a CPU."""
    if backend.device.type != "cpu":
        return {}
    try:
        mine = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        mine = os.cpu_count() or 1
    found: dict[str, int] = {}
    for host, cpus in zip(hostnames, backend.all_gather_object(mine), strict=True):
        found.setdefault(host, cpus)
    return found


def fabric_pass(ctx: FabricContext, output: Output) -> list[Row]:
    """One pass: the schedule's rounds and the node all_reduces; then the confirmations of what they
    found slow (fabric/confirm.py): one measurement can be disturbed by anything else on the machine."""
    rows = measure_rounds(ctx, ctx.schedule.rounds, output, ctx.phase)
    rows += measure_nodes(ctx, output, ctx.phase)
    for number in range(1, CONFIRMATIONS + 1):
        decision = None
        if ctx.backend.rank == 0:  # the others have no rows: rank 0 decides for all, so none is left waiting
            suspects = suspects_of(rows, ctx.hostnames, ctx.config.slow_factor, frozenset(ctx.crowded))
            found = plan_confirmation(suspects, rows)
            decision = (found.suspects, found.pairs, found.nodes)  # plain values travel
        plan = ConfirmationPlan(*ctx.backend.broadcast_object(decision, root=0))
        if not (plan.pairs or plan.nodes):
            break
        output.note(plan.note(number))
        if plan.pairs:
            rows += measure_rounds(ctx, ctx.schedule.holding(plan.pairs), output, RECHECK)
        if plan.nodes:
            rows += measure_nodes(ctx, output, RECHECK)
    return rows


def _fail_on_outlier_line(config: FabricConfig, analysis: FabricAnalysis) -> None:
    if config.fail_on_outlier and analysis.suspects:
        names = ", ".join(suspect.name for suspect in analysis.suspects)
        count = plural(len(analysis.suspects), "suspect")
        print(f"commbench: fabric: {count} (--fail-on-outlier): {names}",
              file=sys.stderr)
