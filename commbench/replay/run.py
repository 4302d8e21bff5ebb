"""What each rank of `commbench replay` runs: check that every rank read the same recording, create
the recording's process groups, time the passes (then --check and --record), and gather every rank's
times into rows."""

import hashlib

from commbench.backends.base import Backend
from commbench.core.devices import MemoryBudget, approximate_bytes
from commbench.core.words import plural
from commbench.errors import RunError, UsageError, brief
from commbench.replay.config import ReplayConfig, load_selected, mapped_plan
from commbench.replay.execute import buffer_need, check_pass, prepare, time_passes
from commbench.replay.mapping import ReplayPlan
from commbench.replay.model import Trace
from commbench.replay.record import record_pass
from commbench.replay.rows import RowContext, build_rows
from commbench.replay.summary import summary_lines
from commbench.results.model import Row
from commbench.running.runner import Session
from commbench.writers.output import Output


def _digest(trace: Trace) -> str:
    text = repr([(rank, [(*op.signature(), op.group, op.peer, op.root) for op in ops])
                 for rank, ops in sorted(trace.ops.items())])
    return hashlib.sha256(f"{trace.world_size}|{text}".encode()).hexdigest()


def _agree(backend: Backend, trace: Trace) -> None:
    digests = backend.all_gather_object(_digest(trace))
    differing = [rank for rank, digest in enumerate(digests) if digest != digests[0]]
    if differing:
        raise UsageError(f"rank {differing[0]} read a different recording than rank 0: every rank must "
                         "be given the same files")


def _create_groups(backend: Backend, plan: ReplayPlan) -> dict[str, object]:
    """Process groups for the plan's groups, created once, in the same order on every rank."""
    created = [group for group in plan.groups if not group.is_default]
    try:
        handles = backend.new_group_handles([list(group.members) for group in created],
                                            [group.desc for group in created]) if created else []
    except Exception as exc:
        raise RunError(f"rank {backend.rank} could not create the replay's "
                       f"{plural(len(created), 'process group')}: {brief(exc)}") from exc
    found: dict[str, object] = {group.label: None for group in plan.groups if group.is_default}
    found.update({group.label: handle for group, handle in zip(created, handles, strict=True)})
    return found


def check_memory(needs: list[int], budget: MemoryBudget | None) -> None:
    """UsageError when a rank's buffers (``needs``, by rank: every rank's, so that every rank says the
    same) would exceed the memory budget the ranks agreed on, the same a sweep's sizes are refused
    against; checked before any buffer is allocated."""
    if budget is None or not needs:
        return
    rank = max(range(len(needs)), key=lambda index: needs[index])
    if needs[rank] > budget.limit:
        raise UsageError(f"the replay needs {approximate_bytes(needs[rank])} of buffers on rank {rank}, more "
                         f"than the memory budget ({budget.describe()}; docs/limits.md)")


def run_replay(configs: list[ReplayConfig], backend: Backend, output: Output, session: Session) -> list[Row]:
    """One rank's replay: the plan, the groups, the passes, then every rank's times -> rows (the same
    rows on every rank; rank 0's output writes and prints them). Of the ``session`` it takes the memory
    budget: a replay makes its own groups."""
    (config,) = configs
    trace = load_selected(config)
    _agree(backend, trace)
    plan = mapped_plan(trace, backend.world_size)
    check_memory(backend.all_gather_object(buffer_need(plan, backend.rank)), session.memory)
    steps = prepare(plan, backend.rank, backend, _create_groups(backend, plan))
    times = time_passes(steps, backend, config.warmup, config.iters, config.keep_gaps)
    if config.check:
        times.wrong = check_pass(steps, backend, plan.world_size)
    if config.record:
        record_pass(steps, backend, config.record, trace.format)
    everyone = backend.all_gather_object(times)
    context = RowContext(backend.name, backend.device.type, backend.world_size, config.warmup, config.iters)
    rows = build_rows(context, plan, everyone, [item.wrong for item in everyone] if config.check else None)
    for row in rows:
        output.row(row)
    for line in summary_lines(trace, plan, rows):
        output.note(line)
    return rows
