"""`commbench replay`'s configuration (each field declares its option) and its checks before anything
starts; command.py registers the feature, run.py is what each rank runs. Importing this module does not
import torch.

Every process (the spawner and each rank) loads, selects and validates the recording itself, so bad
input stops before any process group starts, and the ranks then check that they all read the same thing.
"""

from dataclasses import dataclass, field, replace
from pathlib import Path

from commbench.config.launch import LaunchConfig, check_count, resolve_launch
from commbench.config.options import check_options, option
from commbench.core.words import plural
from commbench.errors import UsageError
from commbench.replay.loading import expand, load_trace
from commbench.replay.mapping import ReplayPlan, map_trace
from commbench.replay.model import PATTERN, Trace
from commbench.replay.validate import validate
from commbench.replay.window import parse_selection, select
from commbench.writers.paths import check_not_among, identities


@dataclass(kw_only=True)
class ReplayConfig:
    """One `commbench replay` run."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)  # nproc 0: as many ranks as recorded
    traces: list[str] = option(factory=list, positional=True, metavar="TRACE...",
                               help="Flight Recorder dumps or profiler traces: directories, globs or files.")
    select: str = option("all", help="all, seq:A-B or last:N (docs/replay.md).")  # window.py
    warmup: int = option(1, minimum=0, help="Untimed passes.")
    iters: int = option(5, minimum=1, help="Timed passes.")
    keep_gaps: bool = option(False, help="Keep each operation's recorded offset within a pass.")
    check: bool = option(False, help="One more pass with known values; count wrong elements.")
    record: str | None = option(None, metavar="PREFIX",  # record.py
                                help="One more pass, recorded as the input was, to PREFIX<rank>.")
    pattern: str = PATTERN

    def check_world(self, world_size: int) -> None:
        """Any world size takes a recording (mapping.py's rule); resolve_replay checks that something
        can be placed on the ranks it spawns, and each rank on the world it finds."""


# The most operations a rank replays (docs/limits.md): each is a step of every pass, with buffers and a
# timer slot; a recording with more is cut to a window (--select) first.
MAX_REPLAY_OPS = 100_000


def load_selected(config: ReplayConfig) -> Trace:
    """The recording the config names, cut to its window and validated across ranks."""
    trace = select(load_trace(config.traces), parse_selection(config.select))
    busiest = max(trace.ops, key=lambda rank: len(trace.ops[rank]), default=None)
    if busiest is not None and len(trace.ops[busiest]) > MAX_REPLAY_OPS:
        raise UsageError(f"rank {busiest}'s recording holds {len(trace.ops[busiest]):,} operations in the "
                         f"window, more than the {MAX_REPLAY_OPS:,} a replay runs: choose a window with "
                         "--select seq:A-B or last:N (docs/limits.md)")
    return validate(trace)


def resolve_replay(config: ReplayConfig) -> ReplayConfig:
    """A checked copy with backend, device and rank count settled; UsageError on the first problem."""
    check_options(config)
    check_count("--nproc", config.launch.nproc, minimum=0)
    parse_selection(config.select)
    trace = load_selected(config)
    launch = resolve_launch(replace(config.launch, nproc=config.launch.nproc or trace.world_size))
    mapped_plan(trace, launch.nproc)
    if config.record:
        check_record_prefix(config.record, launch.nproc, expand(config.traces))
    return replace(config, launch=launch)


def check_record_prefix(prefix: str, world_size: int, traces: list[Path]) -> None:
    """UsageError when --record would write over one of the recording's own files (a prefix that
    names the input: the replay would replace what it replays)."""
    outputs = [Path(f"{prefix}{rank}{suffix}") for rank in range(world_size) for suffix in ("", ".json")]
    check_not_among("--record", outputs, identities(traces))


def mapped_plan(trace: Trace, world_size: int) -> ReplayPlan:
    plan = map_trace(trace, world_size)
    if not any(plan.ops.values()):
        reasons = ", ".join(f"{name} x{count}" for name, count in plan.unmapped.most_common(3))
        raise UsageError(f"no recorded operation can be placed on {plural(world_size, 'rank')} ({reasons})")
    return plan
