"""The launch configuration every benchmark nests, and its validation.

``LaunchConfig`` holds what belongs to the whole run (one process group, one set of files, one console):
where the ranks come from, how long to wait, the sub-communicators, where rows go and how the console
shows them. Every kind of benchmark (a sweep's ``RunConfig``, a pattern's config, ...) nests one and
offers ``check_world`` for the checks that need the world size (``Benchmark``). Importing this module
does not import torch; only resolving the backend and device does.
"""

import os
from dataclasses import dataclass, field, fields, replace
from typing import Protocol

from commbench.core.devices import cuda_ruled_out, torch_build
from commbench.core.groups import check_group_options
from commbench.errors import UsageError, did_you_mean
from commbench.provenance.baselines import check_judging
from commbench.writers.formats import OUTPUT_FORMATS

BACKENDS = ("gloo", "nccl", "mpi", "ucc")
DEVICES = ("cpu", "cuda")


@dataclass(kw_only=True)
class LaunchConfig:
    """Settings of the whole run, shared by its benchmarks: set on the command line or under a sweep
    file's `defaults`, never per benchmark."""

    backend: str | None = None  # None: nccl when CUDA is available, else gloo
    device: str | None = None  # None: cuda for nccl/ucc when available, else cpu
    nproc: int = 2  # ranks to spawn when no launcher is present
    timeout_s: float = 300.0  # process-group start, each collective, each check-in
    group_size: int | None = None  # ranks per sub-communicator (None: the whole world is one group)
    group_layout: str | None = None  # contiguous (default with group_size) or strided
    groups: str | None = None  # intra-node or inter-node: groups from the ranks' host names
    output_dir: str = "results"
    csv_path: str | None = None
    json_path: str | None = None
    output_format: str = "table"  # console output: table, nccl-tests or jsonl
    quiet: bool = False
    per_rank: bool = False  # print each rank's mean time and arrival skew
    skew_threshold_percent: float = 25.0  # a skew above this % of the p50 time names the straggler
    nccl_debug: bool = False  # NCCL's INFO log beside the results; rows get NCCL's choices (provenance)
    expect: str | None = None  # a baselines file or a shipped baseline's name: a verdict per row
    fail_below: float | None = None  # exit 1 when a row's busbw is below this % of its reference
    duration_s: float | None = None  # soak: repeat the run until this many seconds have passed
    passes: int | None = None  # soak: at most this many passes (alone: exactly this many)
    argv: list[str] = field(default_factory=list)  # the command line, recorded with results


LAUNCH_FIELDS = tuple(f.name for f in fields(LaunchConfig))


class Benchmark(Protocol):
    """What launch needs of any benchmark's configuration."""

    launch: LaunchConfig

    def check_world(self, world_size: int) -> None:
        """UsageError for what does not fit a world of this size; run before any process group."""


def check_count(flag: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise UsageError(f"{flag} {value} must be at least {minimum}")


def resolve_launch(launch: LaunchConfig) -> LaunchConfig:
    """A copy with the backend and device chosen and every value checked; UsageError on the first
    problem. The backend is resolved last: it is the one check that imports torch."""
    check_count("--nproc", launch.nproc, minimum=1)
    if launch.timeout_s <= 0:
        raise UsageError(f"--timeout {launch.timeout_s:g} must be above 0 seconds")
    check_group_options(launch.group_size, launch.group_layout, launch.groups)
    if launch.skew_threshold_percent < 0:
        raise UsageError(f"--skew-threshold {launch.skew_threshold_percent:g} must not be negative")
    check_judging(launch.expect, launch.fail_below)
    if launch.passes is not None:
        check_count("--repeat", launch.passes, minimum=1)
    if launch.duration_s is not None and not launch.duration_s > 0:
        raise UsageError(f"--duration {launch.duration_s:g} must be above 0 seconds")
    if launch.output_format not in OUTPUT_FORMATS:
        raise UsageError(f"unknown format {launch.output_format!r}"
                         f"{did_you_mean(launch.output_format, list(OUTPUT_FORMATS))}; "
                         f"choose from {', '.join(OUTPUT_FORMATS)}")
    backend, device = resolve_backend_and_device(launch.backend, launch.device)
    return replace(launch, backend=backend, device=device)


def resolve_backend_and_device(backend: str | None, device: str | None) -> tuple[str, str]:
    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}{did_you_mean(backend, list(BACKENDS))}; "
                         f"choose from {', '.join(BACKENDS)}")
    if device is not None and device not in DEVICES:
        raise UsageError(f"unknown device {device!r}; choose cpu or cuda")
    if backend in (None, "gloo") and device in (None, "cpu") and \
            cuda_ruled_out(os.environ, torch_build(), os.path.exists) is not None:
        return "gloo", "cpu"  # what torch would answer, known without importing it (seconds)
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if backend is None:
        backend = "nccl" if cuda and device != "cpu" else "gloo"
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
    if device == "cuda" and not cuda:
        raise UsageError("--device cuda but CUDA is not available on this machine")
    if backend == "nccl" and device != "cuda":
        raise UsageError("backend nccl runs on CUDA devices only: use --device cuda or --backend gloo")
    return backend, device
