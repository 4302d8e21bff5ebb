"""The run configuration: one dataclass the command line (and sweep files) fill, validated in one place.

Validation happens before any process group starts, so bad input always ends with a one-line message
and exit status 2.
"""

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist

from commbench.collectives import resolve_collectives
from commbench.dtypes import canonical_dtype
from commbench.errors import UsageError, did_you_mean
from commbench.sizes import parse_sizes

BACKENDS = ("gloo", "nccl", "mpi", "ucc")
DEVICES = ("cpu", "cuda")
MODES = ("sync", "async")
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
    warmup: int = 5
    iters: int = 20
    root: int = 0
    backend: str | None = None  # None: nccl when CUDA is available, else gloo
    device: str | None = None  # None: cuda for nccl/ucc when available, else cpu
    nproc: int = 2  # ranks to spawn when no launcher is present
    timeout_s: float = 300.0
    output_dir: str = "results"
    csv_path: str | None = None
    json_path: str | None = None
    quiet: bool = False
    output_format: str = "table"  # console output: table, nccl-tests or jsonl
    argv: list[str] = field(default_factory=list)  # the command line, recorded with results


# Settings of the whole run (one process group, one set of files, one console): in a sweep file they go
# under `defaults` or on the command line, never in one benchmark. Every other field is per benchmark.
RUN_WIDE_FIELDS = ("backend", "device", "nproc", "timeout_s", "output_dir", "csv_path", "json_path", "quiet",
                   "output_format", "argv")


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


# List fields whose text is more than a comma list: each item of a sizes list is itself a size spec.
LIST_ITEM_PARSERS: dict[str, Callable[[str], list]] = {"sizes": parse_sizes}


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
    _check_count("--iters", config.iters, minimum=1)
    _check_count("--nproc", config.nproc, minimum=1)
    if config.root < 0:
        raise UsageError(f"--root {config.root} must not be negative")
    if config.timeout_s <= 0:
        raise UsageError(f"--timeout {config.timeout_s:g} must be above 0 seconds")

    if config.output_format not in OUTPUT_FORMATS:
        raise UsageError(f"unknown format {config.output_format!r}"
                         f"{did_you_mean(config.output_format, list(OUTPUT_FORMATS))}; "
                         f"choose from {', '.join(OUTPUT_FORMATS)}")

    backend, device = resolve_backend_and_device(config.backend, config.device)
    return replace(config, collectives=collectives, dtypes=dtypes, modes=modes, ops=ops,
                   backend=backend, device=device)


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

