"""`commbench fabric`'s configuration, and what can be checked of it before measuring.

FabricConfig nests the LaunchConfig every benchmark has (config/launch.py) and is a config.Benchmark:
resolve_fabric checks what needs no world (values, combinations, and the launch settings through
resolve_launch) before anything starts; check_world what needs the world size (launch calls it before
spawning and on every rank), and memory_problem whether a rank's buffers fit. Each problem is one
UsageError (exit status 2).
"""

from dataclasses import dataclass, field, replace

from commbench.config.launch import LaunchConfig, resolve_launch
from commbench.config.options import check_options, option
from commbench.core.sizes import approximate_size, format_size, parse_size
from commbench.errors import UsageError
from commbench.fabric.matrices import KIND
from commbench.fabric.outliers import DEFAULT_SLOW_FACTOR
from commbench.fabric.schedule import check_sample

DEFAULT_SIZE = 64 * 2**20
DEFAULT_LATENCY_SIZE = 8
LATENCY_ITERS_PER_ITER = 5  # small messages are cheap, and their times noisier


@dataclass(kw_only=True)
class FabricConfig:
    """One `commbench fabric` run."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    size: int = option(DEFAULT_SIZE, parse=parse_size, shown_default="64M", minimum=1,
                       help="Bytes per message of the bandwidth test.")
    latency_size: int = option(DEFAULT_LATENCY_SIZE, parse=parse_size, minimum=1,
                               help="Bytes per message of the ping-pong.")
    iters: int = option(10, minimum=1, help="Timed messages per pair and direction.")  # per measurement
    warmup: int = option(2, minimum=0, help="Untimed messages before them.")
    serial: bool = option(False, help="Measure one pair at a time instead of a round's pairs at once.")
    sample: int | None = option(None, metavar="K", minimum=1,
                                help="Pair each rank with K peers (K rounds, covering every host) instead of "
                                     "every rank.")
    slow_factor: float = option(  # the outlier rule's minimum gap (see outliers.py)
        DEFAULT_SLOW_FACTOR, above=1,
        bounds="must be above 1 (2: half the median bandwidth or twice the median latency)",
        help="A pair is an outlier only when this many times off its class's median.")
    fail_on_outlier: bool = option(False, help="Exit 1 when a host, rank or link is named.")
    kind: str = KIND

    def check_world(self, world_size: int) -> None:
        """What the world size decides: a pair needs two ranks, and --sample K needs K peers."""
        if world_size < 2:
            raise UsageError(f"fabric measures pairs of ranks: a world of {world_size} rank has none "
                             "(--nproc 2 or more, or launch more ranks)")
        if self.sample is not None:
            check_sample(self.sample, world_size)


def resolve_fabric(config: FabricConfig) -> FabricConfig:
    """A validated copy with backend and device filled in; UsageError on the first problem."""
    check_options(config)
    return replace(config, launch=resolve_launch(config.launch))


def phase_iters(config: FabricConfig) -> list[int]:
    """Timed messages of each of fabric.measure.PHASES: --iters each way for bandwidth,
    LATENCY_ITERS_PER_ITER times that for latency."""
    return [config.iters] * 2 + [config.iters * LATENCY_ITERS_PER_ITER] * 2


def buffer_bytes(config: FabricConfig) -> int:
    """Bytes a rank allocates: a send and a receive buffer for each of the two message sizes."""
    return 2 * (config.size + config.latency_size)


def available_host_bytes() -> int | None:
    """The memory the kernel says new allocations can get (MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_problem(config: FabricConfig, ranks_sharing: int, available: int | None) -> str | None:
    """Why ``ranks_sharing`` ranks' buffers do not fit in ``available`` bytes, or None when they do."""
    needed = buffer_bytes(config) * ranks_sharing
    if available is None or needed <= available:
        return None
    who = "a rank" if ranks_sharing == 1 else f"{ranks_sharing} ranks"
    return (f"--size {format_size(config.size)} does not fit in memory: {who} need "
            f"{approximate_size(needed)} of buffers (a send and a receive buffer each) and "
            f"{approximate_size(available)} is free")


@dataclass
class Outcome:
    """What this rank concluded: the suspects' names (the launch glue turns them into an exit status)."""

    suspects: list[str] = field(default_factory=list)
