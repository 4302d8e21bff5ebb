"""A sweep's configuration: ``RunConfig`` (one benchmark of a command line or sweep file, nesting the
run's ``LaunchConfig``), the fields by their flat command-line names, and its validation.

Validation happens before any process group starts, so bad input always ends with a one-line message and
exit status 2. Importing this module does not import torch; only resolving the backend and device does.
"""

import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from commbench.config.launch import LAUNCH_FIELDS, LaunchConfig, check_count, resolve_launch
from commbench.core.dtypes import canonical_dtype, element_size
from commbench.core.groups import split_world
from commbench.core.sizes import parse_duration, parse_size, parse_sizes
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
from commbench.measure.impls import DEFAULT_IMPLS, check_applicable, resolve_impls
from commbench.measure.planning import plan_tables

BARRIERS = ("none", "per-iter")
REDUCE_OPS = ("sum", "avg", "min", "max", "prod", "premul_sum")
DEFAULT_SIZES = "1K:16M"


@dataclass(kw_only=True)
class RunConfig:
    """One sweep benchmark: the command line fills one, a sweep file one per entry of `benchmarks`."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    name: str = ""  # the benchmark's name in a sweep file, recorded in each row
    collectives: list[str] = field(default_factory=lambda: ["all_reduce"])
    # --collective all: what the backend cannot run here is named and left out (set by resolve());
    # a collective named on its own that cannot run is an error
    all_collectives: bool = False
    sizes: list[int] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    modes: list[str] = field(default_factory=lambda: ["sync"])
    ops: list[str] = field(default_factory=lambda: ["sum"])
    placements: list[str] = field(default_factory=list)  # empty: each collective's default placement
    check: bool = False  # --check: compare every output element after timing
    check_every: int = 0  # also check after every N timed iterations (0: once per size, at the end)
    splits: str = DEFAULT_SPLITS  # v-collectives: spread:F or a byte-matrix file
    split_matrix: list[list[int]] | None = None  # the file's matrix, read by resolve() and recorded
    p2p_window: int = 16  # messages in flight per op for p2p_uni and p2p_bidir
    premul_factor: float = 0.5  # premul_sum's factor (a power of two keeps --check exact)
    warmup: int = 5
    iters: int | None = None  # None: adaptive (see measure/sampling.py); a number fixes the count
    time_per_size: float = 0.5  # adaptive: seconds of timed ops per size and mode
    min_iters: int = 5
    max_iters: int = 1000
    precision: float = 0.05  # adaptive: stop once the median is known to +- this fraction
    barrier: str = "none"  # sync mode: none | per-iter
    cuda_graph: int = 0  # replays of a captured window; 0: no graph
    max_memory: int | None = None  # bytes of buffers per rank above which a size is refused
    root: int = 0
    impls: list[str] = field(default_factory=lambda: list(DEFAULT_IMPLS))  # --impl: ways to run each op
    profile_kernels: bool = False  # --profile-kernels: record what one op per size ran on the device

    def check_world(self, world_size: int) -> None:
        """The root and a splits file against the ranks one collective will span in this world (groups
        from host names are known only once the ranks have started: run_sweep checks those)."""
        launch = self.launch
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

    def split_spec(self) -> SplitSpec:
        """The --splits of a resolved config (the file's matrix as resolve() read it)."""
        if self.split_matrix is not None:
            return SplitSpec(text=self.splits, matrix=tuple(tuple(row) for row in self.split_matrix),
                             path=self.splits)
        return parse_splits(self.splits)


RUN_FIELDS = tuple(f.name for f in fields(RunConfig) if f.name != "launch")


def run_config(**values: Any) -> RunConfig:
    """A RunConfig from flat field values (launch fields included), as the command line and sweep
    files name them."""
    launch = {name: values.pop(name) for name in list(values) if name in LAUNCH_FIELDS}
    return RunConfig(launch=LaunchConfig(**launch), **values)


def flat_fields(config: RunConfig) -> dict[str, Any]:
    """Every field of a RunConfig by its flat name (the inverse of run_config)."""
    values = {name: getattr(config, name) for name in RUN_FIELDS}
    values.update({name: getattr(config.launch, name) for name in LAUNCH_FIELDS})
    return values


def parse_list(text: str, flag: str = "") -> list[str]:
    """The names of a comma list. An empty one (``a,,b``, a comma at an end) is a UsageError rather than
    skipped: it is most often a name lost to a typo."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 1 and not all(parts):
        raise UsageError(f"{flag + ' ' if flag else ''}{text!r}: an empty name in the comma list (two commas "
                         "together, or one at an end)")
    return [part for part in parts if part]


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


# List fields whose text is more than a comma list: each item of a sizes list is itself a size spec.
LIST_ITEM_PARSERS: dict[str, Callable[[str], list]] = {"sizes": parse_sizes}
# Number fields that may also be written as text: a byte count as a size (8G), seconds as a time (10m).
SCALAR_TEXT_PARSERS: dict[str, Callable[[str], Any]] = {"max_memory": parse_size,
                                                        "duration_s": parse_duration}


def list_field_from_text(name: str, text: str, flag: str = "") -> list:
    """The list field ``name`` from the text a user typed (the command line's form) after ``flag``."""
    parser = LIST_ITEM_PARSERS.get(name)
    if parser is not None:
        return parser(text)
    item_type = typing.get_args(field_type(name)[0])[0]
    parts = parse_list(text, flag)
    if item_type in (int, float):
        try:
            return [item_type(part) for part in parts]
        except ValueError:
            raise UsageError(f"{name}: expected a comma list of numbers, got {text!r}") from None
    return parts


def is_list_field(name: str) -> bool:
    return typing.get_origin(field_type(name)[0]) is list


def field_type(name: str) -> tuple[Any, bool]:
    """(the type of the field ``name`` of RunConfig or LaunchConfig without None, whether it may be
    None), from its annotation."""
    owner = LaunchConfig if name in LAUNCH_FIELDS else RunConfig
    hint = typing.get_type_hints(owner)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        others = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return (others[0] if len(others) == 1 else hint), len(others) < len(typing.get_args(hint))
    return hint, False


def _check_counts(config: RunConfig) -> None:
    check_count("--warmup", config.warmup, minimum=0)
    if config.iters is not None:
        check_count("--iters", config.iters, minimum=1)
    check_count("--min-iters", config.min_iters, minimum=1)
    check_count("--max-iters", config.max_iters, minimum=1)
    if config.min_iters > config.max_iters:
        raise UsageError(f"--min-iters {config.min_iters} is above --max-iters {config.max_iters}")
    if config.time_per_size <= 0:
        raise UsageError(f"--time-per-size {config.time_per_size:g} must be above 0 seconds")
    if not 0 < config.precision < 1:
        raise UsageError(f"--precision {config.precision:g} must be a fraction between 0 and 1, e.g. 0.05")
    check_count("--cuda-graph", config.cuda_graph, minimum=0)
    check_count("--check-every", config.check_every, minimum=0)
    check_count("--p2p-window", config.p2p_window, minimum=1)


def _check_values(config: RunConfig) -> None:
    for op in config.ops:
        if op not in REDUCE_OPS:
            raise UsageError(f"unknown reduce op {op!r}{did_you_mean(op, list(REDUCE_OPS))}; "
                             f"choose from {', '.join(REDUCE_OPS)}")
    if not config.sizes:
        raise UsageError("no sizes given")
    if any(size < 0 for size in config.sizes):
        raise UsageError("sizes must not be negative")
    if config.barrier not in BARRIERS:
        raise UsageError(f"unknown --barrier {config.barrier!r}; choose {' or '.join(BARRIERS)}")
    if config.max_memory is not None and config.max_memory <= 0:
        raise UsageError("--max-memory must be above 0 bytes")
    if config.root < 0:
        raise UsageError(f"--root {config.root} must not be negative")
    if not math.isfinite(config.premul_factor):
        raise UsageError(f"--premul-factor {config.premul_factor} must be a finite number")


def resolve(config: RunConfig) -> RunConfig:
    """A copy with defaults filled in and every value checked; UsageError on the first problem."""
    collectives = resolve_collectives(config.collectives)
    dtypes = list(dict.fromkeys(canonical_dtype(name) for name in config.dtypes))
    if not dtypes:
        raise UsageError("no dtype given")
    modes = parse_choices(",".join(config.modes), MODES, "--mode")
    _check_values(config)
    _check_counts(config)
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
    launch = resolve_launch(config.launch)
    if config.cuda_graph and (launch.device != "cuda" or launch.backend != "nccl"):
        raise UsageError("--cuda-graph captures NCCL collectives in a CUDA graph: it needs --device cuda "
                         "and --backend nccl")
    every = config.all_collectives or any(part.strip() == "all" for part in config.collectives)
    return replace(config, launch=launch, collectives=collectives, all_collectives=every, dtypes=dtypes,
                   modes=modes, ops=list(dict.fromkeys(config.ops)), placements=placements,
                   check=config.check or config.check_every > 0, splits=spec.text, split_matrix=matrix,
                   impls=impls)
