"""The run configuration: one dataclass the command line (and sweep files) fill, validated in one place.

Validation happens before any process group starts, so bad input always ends with a one-line message
and exit status 2.
"""

import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist

from commbench.collectives import PLACEMENTS, resolve_collectives
from commbench.dtypes import canonical_dtype, element_size
from commbench.errors import UsageError, did_you_mean
from commbench.groups import check_group_options
from commbench.provenance.baselines import check_judging
from commbench.sizes import parse_size, parse_sizes
from commbench.splits import DEFAULT_SPLITS, SplitSpec, check_element_sizes, parse_splits

BACKENDS = ("gloo", "nccl", "mpi", "ucc")
DEVICES = ("cpu", "cuda")
MODES = ("sync", "async")
BARRIERS = ("none", "per-iter")
REDUCE_OPS = ("sum", "avg", "min", "max", "prod", "premul_sum")
OUTPUT_FORMATS = ("table", "nccl-tests", "jsonl")
DEFAULT_SIZES = "1K:16M"


@dataclass
class RunConfig:
    """One benchmark: the command line fills one, a sweep file one per entry of its `benchmarks` list."""

    name: str = ""  # the benchmark's name in a sweep file, recorded in each row
    collectives: list[str] = field(default_factory=lambda: ["all_reduce"])
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
    iters: int | None = None  # None: adaptive (see sampling.py); a number fixes the count
    time_per_size: float = 0.5  # adaptive: seconds of timed ops per size and mode
    min_iters: int = 5
    max_iters: int = 1000
    precision: float = 0.05  # adaptive: stop once the median is known to +- this fraction
    barrier: str = "none"  # sync mode: none | per-iter
    cuda_graph: int = 0  # replays of a captured window; 0: no graph
    max_memory: int | None = None  # bytes of buffers per rank above which a size is refused
    root: int = 0
    backend: str | None = None  # None: nccl when CUDA is available, else gloo
    device: str | None = None  # None: cuda for nccl/ucc when available, else cpu
    nproc: int = 2  # ranks to spawn when no launcher is present
    timeout_s: float = 300.0
    output_dir: str = "results"
    csv_path: str | None = None
    json_path: str | None = None
    quiet: bool = False
    group_size: int | None = None  # ranks per sub-communicator (None: the whole world is one group)
    group_layout: str | None = None  # contiguous (default with group_size) or strided
    groups: str | None = None  # intra-node or inter-node: groups from the ranks' host names
    per_rank: bool = False  # print each rank's mean time and arrival skew
    skew_threshold_percent: float = 25.0  # a skew above this % of the p50 time names the straggler
    output_format: str = "table"  # console output: table, nccl-tests or jsonl
    nccl_debug: bool = False  # NCCL's INFO log beside the results; rows get NCCL's choices (provenance)
    expect: str | None = None  # a baselines file or a shipped baseline's name: a verdict per row
    fail_below: float | None = None  # exit 1 when a row's busbw is below this % of its reference
    argv: list[str] = field(default_factory=list)  # the command line, recorded with results


# Settings of the whole run (one process group, one set of files, one console): in a sweep file they go
# under `defaults` or on the command line, never in one benchmark. Every other field is per benchmark.
RUN_WIDE_FIELDS = ("backend", "device", "nproc", "timeout_s", "output_dir", "csv_path", "json_path", "quiet",
                   "output_format", "group_size", "group_layout", "groups", "per_rank",
                   "skew_threshold_percent", "nccl_debug", "expect", "fail_below", "argv")


def parse_modes(text: str) -> list[str]:
    modes: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part == "both":
            modes.extend(MODES)
        elif part in MODES:
            modes.append(part)
        elif part:
            raise UsageError(f"unknown mode {part!r}{did_you_mean(part, [*MODES, 'both'])}; "
                             "choose sync, async or both")
    if not modes:
        raise UsageError("no mode given: --mode sync, async or both")
    return list(dict.fromkeys(modes))


def parse_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_placements(text: str) -> list[str]:
    placements: list[str] = []
    for part in parse_list(text):
        if part == "both":
            placements.extend(PLACEMENTS)
        elif part in PLACEMENTS:
            placements.append(part)
        else:
            raise UsageError(f"unknown placement {part!r}{did_you_mean(part, [*PLACEMENTS, 'both'])}; "
                             "choose out-of-place, in-place or both")
    if not placements:
        raise UsageError("no placement given: --placement out-of-place, in-place or both")
    return list(dict.fromkeys(placements))


def split_spec(config: "RunConfig") -> SplitSpec:
    """The --splits of a resolved config (the file's matrix as resolve() read it)."""
    if config.split_matrix is not None:
        return SplitSpec(text=config.splits, matrix=tuple(tuple(row) for row in config.split_matrix),
                         path=config.splits)
    return parse_splits(config.splits)


# List fields whose text is more than a comma list: each item of a sizes list is itself a size spec.
LIST_ITEM_PARSERS: dict[str, Callable[[str], list]] = {"sizes": parse_sizes}
# Number fields that may also be written as text: a byte count as a size (8G).
SCALAR_TEXT_PARSERS: dict[str, Callable[[str], Any]] = {"max_memory": parse_size}


def list_field_from_text(name: str, text: str) -> list:
    """RunConfig.<name>, a list field, from the text a user typed (the command line's form)."""
    parser = LIST_ITEM_PARSERS.get(name)
    if parser is not None:
        return parser(text)
    item_type = typing.get_args(field_type(name)[0])[0]
    parts = parse_list(text)
    if item_type in (int, float):
        try:
            return [item_type(part) for part in parts]
        except ValueError:
            raise UsageError(f"{name}: expected a comma list of numbers, got {text!r}") from None
    return parts


def is_list_field(name: str) -> bool:
    return typing.get_origin(field_type(name)[0]) is list


def field_type(name: str) -> tuple[Any, bool]:
    """(the type of RunConfig.<name> without None, whether it may be None), from its annotation."""
    hint = typing.get_type_hints(RunConfig)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        others = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return (others[0] if len(others) == 1 else hint), len(others) < len(typing.get_args(hint))
    return hint, False


def resolve(config: RunConfig) -> RunConfig:
    """A copy with defaults filled in and every value checked; UsageError on the first problem."""
    collectives = resolve_collectives(config.collectives)
    dtypes = list(dict.fromkeys(canonical_dtype(name) for name in config.dtypes))
    if not dtypes:
        raise UsageError("no dtype given")
    modes = parse_modes(",".join(config.modes))
    ops = list(dict.fromkeys(config.ops))
    for op in ops:
        if op not in REDUCE_OPS:
            raise UsageError(f"unknown reduce op {op!r}{did_you_mean(op, list(REDUCE_OPS))}; "
                             f"choose from {', '.join(REDUCE_OPS)}")
    if not config.sizes:
        raise UsageError("no sizes given")
    if any(size < 0 for size in config.sizes):
        raise UsageError("sizes must not be negative")
    _check_count("--warmup", config.warmup, minimum=0)
    if config.iters is not None:
        _check_count("--iters", config.iters, minimum=1)
    _check_count("--min-iters", config.min_iters, minimum=1)
    _check_count("--max-iters", config.max_iters, minimum=1)
    if config.min_iters > config.max_iters:
        raise UsageError(f"--min-iters {config.min_iters} is above --max-iters {config.max_iters}")
    if config.time_per_size <= 0:
        raise UsageError(f"--time-per-size {config.time_per_size:g} must be above 0 seconds")
    if not 0 < config.precision < 1:
        raise UsageError(f"--precision {config.precision:g} must be a fraction between 0 and 1, e.g. 0.05")
    if config.barrier not in BARRIERS:
        raise UsageError(f"unknown --barrier {config.barrier!r}; choose {' or '.join(BARRIERS)}")
    _check_count("--cuda-graph", config.cuda_graph, minimum=0)
    if config.max_memory is not None and config.max_memory <= 0:
        raise UsageError("--max-memory must be above 0 bytes")
    _check_count("--nproc", config.nproc, minimum=1)
    if config.root < 0:
        raise UsageError(f"--root {config.root} must not be negative")
    if config.timeout_s <= 0:
        raise UsageError(f"--timeout {config.timeout_s:g} must be above 0 seconds")
    check_group_options(config.group_size, config.group_layout, config.groups)
    check_judging(config.expect, config.fail_below)
    if config.skew_threshold_percent < 0:
        raise UsageError(f"--skew-threshold {config.skew_threshold_percent:g} must not be negative")
    placements = parse_placements(",".join(config.placements)) if config.placements else []
    _check_count("--check-every", config.check_every, minimum=0)
    _check_count("--p2p-window", config.p2p_window, minimum=1)
    if not math.isfinite(config.premul_factor):
        raise UsageError(f"--premul-factor {config.premul_factor} must be a finite number")
    spec = parse_splits(config.splits)
    check_element_sizes(spec, {dtype: element_size(dtype) for dtype in dtypes})
    matrix = [list(row) for row in spec.matrix] if spec.matrix is not None else None

    if config.output_format not in OUTPUT_FORMATS:
        raise UsageError(f"unknown format {config.output_format!r}"
                         f"{did_you_mean(config.output_format, list(OUTPUT_FORMATS))}; "
                         f"choose from {', '.join(OUTPUT_FORMATS)}")

    backend, device = resolve_backend_and_device(config.backend, config.device)
    if config.cuda_graph and (device != "cuda" or backend != "nccl"):
        raise UsageError("--cuda-graph captures NCCL collectives in a CUDA graph: it needs --device cuda "
                         "and --backend nccl")
    return replace(config, collectives=collectives, dtypes=dtypes, modes=modes, ops=ops,
                   placements=placements, check=config.check or config.check_every > 0,
                   splits=spec.text, split_matrix=matrix, backend=backend, device=device)


def _check_count(flag: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise UsageError(f"{flag} {value} must be at least {minimum}")


def resolve_backend_and_device(backend: str | None, device: str | None) -> tuple[str, str]:
    cuda = torch.cuda.is_available()
    if backend is None:
        backend = "nccl" if cuda and device != "cpu" else "gloo"
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}{did_you_mean(backend, list(BACKENDS))}; "
                         f"choose from {', '.join(BACKENDS)}")
    available = {
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl": dist.is_available() and dist.is_nccl_available() and cuda,
        "mpi": dist.is_available() and dist.is_mpi_available(),
        "ucc": dist.is_available() and dist.is_ucc_available(),
    }
    if not available[backend]:
        why = "needs CUDA, which this machine lacks" if backend == "nccl" and not cuda \
            else f"is not built into torch {torch.__version__}"
        raise UsageError(f"backend {backend} is not available: it {why}")
    if device is None:
        device = "cuda" if cuda and backend in ("nccl", "ucc") else "cpu"
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r}; choose cpu or cuda")
    if device == "cuda" and not cuda:
        raise UsageError("--device cuda but CUDA is not available on this machine")
    if backend == "nccl" and device != "cuda":
        raise UsageError("backend nccl runs on CUDA devices only: use --device cuda or --backend gloo")
    return backend, device

