"""`commbench replay`: its configuration, its checks before anything starts, the one function that
launches it, and what each rank runs.

Every process (the spawner and each rank) loads, selects and validates the recording itself, so bad
input stops before any process group starts, and the ranks then check that they all read the same thing.
"""

import hashlib
from dataclasses import dataclass, field, replace

from commbench.backends.base import Backend
from commbench.config import LaunchConfig, check_count, resolve_launch
from commbench.errors import RunError, UsageError, brief
from commbench.output import Output
from commbench.replay.execute import check_pass, prepare, time_passes
from commbench.replay.loading import load_trace
from commbench.replay.mapping import ReplayPlan, map_trace
from commbench.replay.model import Trace
from commbench.replay.record import record_pass
from commbench.replay.rows import PATTERN, RowContext, build_rows
from commbench.replay.summary import summary_lines
from commbench.replay.validate import validate
from commbench.replay.window import parse_selection, select
from commbench.results import Row


@dataclass(kw_only=True)
class ReplayConfig:
    """One `commbench replay` run."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)  # nproc 0: as many ranks as recorded
    traces: list[str] = field(default_factory=list)  # directories, globs or files
    select: str = "all"  # all, seq:A-B or last:N (window.py)
    warmup: int = 1  # untimed passes
    iters: int = 5  # timed passes
    keep_gaps: bool = False  # re-insert the recorded idle time between a rank's operations
    check: bool = False  # one more pass with known values, every output compared
    record: str | None = None  # PREFIX: record one more pass to PREFIX<rank> (record.py)
    pattern: str = PATTERN

    def check_world(self, world_size: int) -> None:
        """Any world size takes a recording (mapping.py's rule); resolve_replay checks that something
        can be placed on the ranks it spawns, and each rank on the world it finds."""


def load_selected(config: ReplayConfig) -> Trace:
    """The recording the config names, cut to its window and validated across ranks."""
    return validate(select(load_trace(config.traces), parse_selection(config.select)))


def resolve_replay(config: ReplayConfig) -> ReplayConfig:
    """A checked copy with backend, device and rank count settled; UsageError on the first problem."""
    check_count("--warmup", config.warmup, minimum=0)
    check_count("--iters", config.iters, minimum=1)
    check_count("--nproc", config.launch.nproc, minimum=0)
    parse_selection(config.select)
    trace = load_selected(config)
    launch = resolve_launch(replace(config.launch, nproc=config.launch.nproc or trace.world_size))
    _mapped(trace, launch.nproc)
    return replace(config, launch=launch)


def launch_replay(config: ReplayConfig) -> int:
    """The one place a replay reaches the ranks: spawned locally or as a launched rank, each running
    run_replay once its process group is up."""
    from commbench.launch import launch

    return launch([config], run_replay)


def _mapped(trace: Trace, world_size: int) -> ReplayPlan:
    plan = map_trace(trace, world_size)
    if not any(plan.ops.values()):
        reasons = ", ".join(f"{name} x{count}" for name, count in plan.unmapped.most_common(3))
        ranks = "1 rank" if world_size == 1 else f"{world_size} ranks"
        raise UsageError(f"no recorded operation can be placed on {ranks} ({reasons})")
    return plan


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
        raise RunError(f"rank {backend.rank} could not create the replay's {len(created)} process groups: "
                       f"{brief(exc)}") from exc
    found: dict[str, object] = {group.label: None for group in plan.groups if group.is_default}
    found.update({group.label: handle for group, handle in zip(created, handles, strict=True)})
    return found


def run_replay(configs: list[ReplayConfig], backend: Backend, output: Output, session: object = None
               ) -> list[Row]:
    """One rank's replay: the plan, the groups, the passes, then every rank's times -> rows (the same
    rows on every rank; rank 0's output writes and prints them). ``session`` is unused: a replay makes
    its own groups."""
    (config,) = configs
    trace = load_selected(config)
    _agree(backend, trace)
    plan = _mapped(trace, backend.world_size)
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
