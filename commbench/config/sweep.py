"""A sweep's configuration: ``RunConfig`` (one benchmark of a command line or sweep file, nesting the
run's ``LaunchConfig``), each field declaring its option (config/options.py), and its validation.

Validation happens before any process group starts, so bad input always ends with a one-line message and
exit status 2. Importing this module does not import torch; only resolving the backend and device does.
"""

from dataclasses import dataclass, field, replace
from typing import Any

from commbench.config.launch import LaunchConfig, resolve_launch
from commbench.config.options import build, check_options, option, parse_list
from commbench.core.dtypes import canonical_dtype, element_size
from commbench.core.groups import split_world
from commbench.core.sizes import parse_size, parse_sizes
from commbench.core.splits import (
    DEFAULT_SPLITS,
    SplitSpec,
    check_element_sizes,
    check_world_size,
    parse_splits,
)
from commbench.core.words import plural
from commbench.errors import UsageError, did_you_mean
from commbench.measure.collectives import MODES, PLACEMENTS, resolve_collectives
from commbench.measure.impls import DEFAULT_IMPLS, REFERENCE_IMPL, check_applicable, resolve_impls
from commbench.measure.impls import REGISTRY as IMPLS
from commbench.measure.planning import plan_tables

BARRIERS = ("none", "per-iter")
CONCURRENT_GROUPS = ("same", "disjoint")
REDUCE_OPS = ("sum", "avg", "min", "max", "prod", "premul_sum")
DEFAULT_SIZES = "1K:16M"


@dataclass(kw_only=True)
class RunConfig:
    """One sweep benchmark: the command line fills one, a sweep file one per entry of `benchmarks`."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    name: str = option("", flag=None, help="The benchmark's name in a sweep file, recorded in each row.")
    collectives: list[str] = option(
        factory=lambda: ["all_reduce"], flag="--collective",
        help="Comma list of collectives, or 'all' (see `commbench list`).")
    # --collective all: what the backend cannot run here is named and left out (set by resolve());
    # a collective named on its own that cannot run is an error
    all_collectives: bool = False
    sizes: list[int] = option(
        factory=lambda: parse_sizes(DEFAULT_SIZES), shown_default=DEFAULT_SIZES, parse=parse_sizes,
        help="Sizes in bytes: 1K:1G (doubling), 1K:1G:x4, 1M:64M:+8M, 1K,3K,1M or 4096. K/M/G are powers of "
             "1024.")
    dtypes: list[str] = option(factory=lambda: ["float32"], flag="--dtype", help="Comma list of dtypes.")
    modes: list[str] = option(factory=lambda: ["sync"], flag="--mode", help="sync, async or both.")
    ops: list[str] = option(
        factory=lambda: ["sum"], flag="--op",
        help=f"Reduce ops for reducing collectives, comma list of {', '.join(REDUCE_OPS)}.")
    placements: list[str] = option(  # empty: each collective's default placement
        factory=list, flag="--placement",
        help="out-of-place, in-place or both, for all_reduce, reduce_scatter_base and all_gather_base "
             "[default: all_reduce in place, the others out of place].")
    check: bool = option(
        False, help="After timing each size, run one op on known values and count wrong elements.")
    check_every: int = option(
        0, minimum=0, help="Also check after every N timed ops (implies --check; 0: once per size).")
    splits: str = option(
        DEFAULT_SPLITS,
        help="v-collectives: spread:F (0..1), distance:F, zipf:S (F, S >= 0) or a CSV/YAML file of a world "
             "x world byte matrix.")
    split_matrix: list[list[int]] | None = None  # the file's matrix, read by resolve() and recorded
    p2p_window: int = option(16, minimum=1, help="Messages in flight per op for p2p_uni and p2p_bidir.")
    premul_factor: float = option(  # a power of two keeps --check exact
        0.5, help="The factor of --op premul_sum (NCCL only).")
    warmup: int = option(
        5, minimum=0,
        help="Untimed ops per size (adaptive counts: at most this many, until op times stop falling, "
             "within 1/5 of --time-per-size).")
    iters: int | None = option(  # None: adaptive (see measure/sampling.py)
        None, minimum=1,
        help="Timed ops per size and mode; turns adaptive iteration counts off [default: adaptive].")
    time_per_size: float = option(
        0.5, above=0, bounds="must be above 0 seconds",
        help="Adaptive: seconds of timed ops per size and mode.")
    min_iters: int = option(5, minimum=1,
                            help="Adaptive: fewest timed ops per size (6 at least, for the 95% interval).")
    max_iters: int = option(1000, minimum=1, help="Adaptive: most timed ops per size.")
    precision: float = option(
        0.05, above=0, below=1, bounds="must be a fraction between 0 and 1, e.g. 0.05",
        help="Adaptive: stop once the median is known to +- this fraction (95% confidence).")
    barrier: str = option(
        "none", choices=BARRIERS, metavar="[none|per-iter]",
        help="Sync mode: a barrier before every timed op (outside its time).")
    cuda_graph: int = option(  # replays of a captured window; 0: no graph
        0, minimum=0,
        help="CUDA + NCCL, sync mode only: capture --iters ops (default 20) in a CUDA graph, replay N times.")
    max_memory: int | None = option(
        None, parse=parse_size, above=0, bounds="must be above 0 bytes",
        help="Refuse, before allocating, sizes whose buffers and torch's temporaries need more than this per "
             "rank (e.g. 8G) [default: 90% of the free device or available host memory].")
    root: int = option(
        0, minimum=0, bounds="must not be negative",
        help="Root rank of broadcast, reduce, gather and scatter.")
    impls: list[str] = option(
        factory=lambda: list(DEFAULT_IMPLS), flag="--impl",
        help="Comma list of implementations to run each collective by, or 'all' (c10d, nccl-ubr, nccl-symm, "
             "symm-one-shot, ...; docs/implementations.md); one that cannot run here is a row saying why.")
    profile_kernels: bool = option(
        False,
        help="Record what one op per size ran (torch's profiler: kernel names on CUDA) and judge whether "
             "each implementation ran on its own path.")
    per_iteration: bool = option(
        False,
        help="Keep every rank's time of every timed op (every window in async mode) in results.json, and "
             "name the spikes, the rank others waited for, the slowest host and the first op's cost.")
    misalign: int = option(
        0, minimum=0, metavar="BYTES", bounds="must not be negative",
        help="Start every buffer this many bytes past an aligned address (a multiple of every --dtype's "
             "element size).")
    buffer_sets: int = option(
        1, flag="--buffers", minimum=1, metavar="N",
        help="Rotate the ops through N sets of buffers, so that no op finds its data in a cache (N times "
             "the buffers' memory).")
    flush_cache: bool = option(
        False,
        help="Before each timed op (each async window), outside its time, write a buffer the size of the "
             "last-level cache (a GPU's L2), so that no op finds its data there.")
    memory: bool = option(
        False,
        help="Record each size's memory per rank: its buffers, and what torch and the communication "
             "library took beside them (host RSS; on CUDA device memory).")
    concurrent: int = option(
        1, minimum=1, metavar="N",
        help="Run each collective on N communicators at once and report each one's time and its slowdown "
             "against running alone (sync mode).")
    concurrent_groups: str = option(
        "same", choices=CONCURRENT_GROUPS, metavar="[same|disjoint]",
        help="--concurrent: N communicators over the same ranks, or the world cut into N disjoint groups.")
    with_compute: int = option(
        0, minimum=0, metavar="N",
        help="Run an N x N matmul beside each collective on every rank and report both slowdowns, the "
             "collective's and the matmul's, against each alone (sync mode; 0: off).")

    def check_world(self, world_size: int) -> None:
        """The root and a splits file against the ranks one collective will span in this world (groups
        from host names are known only once the ranks have started: run_sweep checks those)."""
        launch = self.launch
        if self.disjoint_groups:
            ranks = world_size // self.concurrent
            if world_size % self.concurrent or ranks < 2:
                raise UsageError(f"--concurrent {self.concurrent} --concurrent-groups disjoint needs a world "
                                 f"of {self.concurrent} x K ranks, K at least 2: "
                                 f"{plural(world_size, 'rank')} cannot be cut so")
            self.check_span(ranks, whole_world=False)
            return
        if launch.group_size is None:
            self.check_span(world_size, whole_world=True)
            return
        plan = split_world(world_size, launch.group_size, launch.group_layout or "contiguous")
        self.check_span(plan.size, whole_world=plan.is_world)

    def check_span(self, ranks: int, whole_world: bool) -> None:
        """UsageError when the root or a splits file does not fit a collective over ``ranks`` ranks, or
        when no size is left to measure (every one too small for an element per rank)."""
        if self.root >= ranks:
            where = f"{'the world' if whole_world else 'a group'} of {plural(ranks, 'rank')}"
            raise UsageError(f"--root {self.root} is outside {where}")
        if self.split_matrix is not None:  # a splits file must be n x n, n the group size
            check_world_size(self.split_spec(), ranks)
        tables, notes = plan_tables(self, ranks)
        if not any(table.sizes for table in tables):
            why = f": {notes[0]}" if notes else ""
            name = f"benchmark {self.name!r}: " if self.name else ""
            raise UsageError(f"{name}nothing to measure at {plural(ranks, 'rank')}{why}")

    @property
    def disjoint_groups(self) -> bool:
        """--concurrent N --concurrent-groups disjoint: the world is cut into N groups, one communicator
        each."""
        return self.concurrent > 1 and self.concurrent_groups == "disjoint"

    def buffer_copies(self) -> int:
        """The sets of buffers a rank holds per size: --buffers' sets, for each communicator it runs on
        (--concurrent N over the same ranks: N)."""
        on_each_rank = 1 if self.disjoint_groups else self.concurrent
        return self.buffer_sets * on_each_rank

    def split_spec(self) -> SplitSpec:
        """The --splits of a resolved config (the file's matrix as resolve() read it)."""
        if self.split_matrix is not None:
            return SplitSpec(text=self.splits, matrix=tuple(tuple(row) for row in self.split_matrix),
                             path=self.splits)
        return parse_splits(self.splits)


def run_config(**values: Any) -> RunConfig:
    """A RunConfig from flat field values (launch fields included), as the command line and sweep
    files name them."""
    return build(RunConfig, values)


def parse_choices(text: str, choices: tuple[str, ...], flag: str) -> list[str]:
    """A comma list of ``choices`` ('both' meaning all of them), duplicates dropped."""
    chosen: list[str] = []
    for part in parse_list(text, flag):
        if part == "both":
            chosen.extend(choices)
        elif part in choices:
            chosen.append(part)
        else:
            raise UsageError(f"unknown {flag[2:]} {part!r}{did_you_mean(part, [*choices, 'both'])}; "
                             f"choose {', '.join(choices)} or both")
    if not chosen:
        raise UsageError(f"no {flag[2:]} given: {flag} {', '.join(choices)} or both")
    return list(dict.fromkeys(chosen))


def _check_values(config: RunConfig) -> None:
    """What the declarations do not say: the combinations, and values checked against a list."""
    for op in config.ops:
        if op not in REDUCE_OPS:
            raise UsageError(f"unknown reduce op {op!r}{did_you_mean(op, list(REDUCE_OPS))}; "
                             f"choose from {', '.join(REDUCE_OPS)}")
    if not config.sizes:
        raise UsageError("no sizes given")
    if any(size < 0 for size in config.sizes):
        raise UsageError("sizes must not be negative")
    if config.min_iters > config.max_iters:
        raise UsageError(f"--min-iters {config.min_iters} is above --max-iters {config.max_iters}")


def _check_cold_and_contention(config: RunConfig, dtypes: list[str], modes: list[str], impls: list[str]
                               ) -> None:
    """--misalign, --buffers, --concurrent and --with-compute against the rest of the run."""
    for dtype in dtypes:
        if config.misalign % element_size(dtype):
            raise UsageError(f"--misalign {config.misalign} is not a whole number of {dtype} elements "
                             f"({element_size(dtype)} bytes)")
    contention = [flag for flag, on in (("--concurrent", config.concurrent > 1),
                                        ("--with-compute", config.with_compute > 0)) if on]
    rebuilt = [flag for flag, on in (("--buffers", config.buffer_sets > 1),
                                     ("--misalign", config.misalign > 0)) if on]
    set_up = [name for name in impls if IMPLS[name].path is not None]
    if set_up and (contention or rebuilt):
        raise UsageError(f"{(contention + rebuilt)[0]} runs on buffers commbench allocates itself: --impl "
                         f"{set_up[0]} sets up buffers of its own; use --impl {REFERENCE_IMPL}")
    if not contention:
        return
    if "async" in modes:
        raise UsageError(f"{contention[0]} times one op per communicator in flight at a time: it cannot "
                         "time --mode async; use --mode sync")
    if config.cuda_graph:
        raise UsageError(f"{contention[0]} issues its ops from the host as they race: it cannot run with "
                         "--cuda-graph")


def resolve(config: RunConfig) -> RunConfig:
    """A copy with defaults filled in and every value checked; UsageError on the first problem."""
    collectives = resolve_collectives(config.collectives)
    dtypes = list(dict.fromkeys(canonical_dtype(name) for name in config.dtypes))
    if not dtypes:
        raise UsageError("no dtype given")
    modes = parse_choices(",".join(config.modes), MODES, "--mode")
    check_options(config)
    _check_values(config)
    placements = parse_choices(",".join(config.placements), PLACEMENTS, "--placement") \
        if config.placements else []
    spec = parse_splits(config.splits)
    check_element_sizes(spec, {dtype: element_size(dtype) for dtype in dtypes})
    matrix = [list(row) for row in spec.matrix] if spec.matrix is not None else None
    if config.cuda_graph and "async" in modes:
        raise UsageError(f"--cuda-graph {config.cuda_graph} captures one sync sequence of ops: it cannot "
                         "time --mode async; use --mode sync")
    impls = resolve_impls(config.impls)
    check_applicable(impls, collectives, everything="all" in config.impls)
    _check_cold_and_contention(config, dtypes, modes, impls)
    launch = resolve_launch(config.launch)
    if config.concurrent > 1 and config.concurrent_groups == "disjoint" and \
            (launch.group_size is not None or launch.groups is not None):
        raise UsageError(f"--concurrent {config.concurrent} --concurrent-groups disjoint cuts the world into "
                         "its own groups: drop --group-size and --groups (or use --concurrent-groups same)")
    if config.cuda_graph and (launch.device != "cuda" or launch.backend != "nccl"):
        raise UsageError("--cuda-graph captures NCCL collectives in a CUDA graph: it needs --device cuda "
                         "and --backend nccl")
    every = config.all_collectives or any(part.strip() == "all" for part in config.collectives)
    return replace(config, launch=launch, collectives=collectives, all_collectives=every, dtypes=dtypes,
                   modes=modes, ops=list(dict.fromkeys(config.ops)), placements=placements,
                   check=config.check or config.check_every > 0, splits=spec.text, split_matrix=matrix,
                   impls=impls)
