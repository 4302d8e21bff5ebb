"""The launch configuration every benchmark nests, and its validation.

``LaunchConfig`` holds what belongs to the whole run (one process group, one set of files, one console):
where the ranks come from, how long to wait, the sub-communicators, where rows go and how the console
shows them. Every kind of benchmark (a sweep's ``RunConfig``, a pattern's config, ...) nests one and
offers ``check_world`` for the checks that need the world size (``Benchmark``). Each field declares its
option (config/options.py); which commands offer it says its ``only`` tags: none, every measuring
command; SOAK, those that can repeat a run; SWEEP, the sweep alone. Importing this module
does not import torch; only resolving the backend and device does.
"""

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from commbench.config.options import check_options, option
from commbench.core.devices import cuda_ruled_out, torch_build
from commbench.core.groups import LAYOUTS, PRESETS, check_group_options
from commbench.core.sizes import parse_duration
from commbench.errors import UsageError
from commbench.provenance.baselines import check_judging
from commbench.writers.formats import OUTPUT_FORMATS

BACKENDS = ("gloo", "nccl", "mpi", "ucc")
DEVICES = ("cpu", "cuda")


# The launch settings a command offers: every measuring command offers those declared for all; only
# the commands that can soak (tag "soak") and only the sweep ("sweep") offer the others.
SOAK, SWEEP = "soak", "sweep"


@dataclass(kw_only=True)
class LaunchConfig:
    """Settings of the whole run, shared by its benchmarks: set on the command line or under a sweep
    file's `defaults`, never per benchmark."""

    backend: str | None = option(
        None, choices=BACKENDS, noun="backend",
        help="gloo, nccl, mpi or ucc [default: nccl with CUDA, else gloo].")
    device: str | None = option(
        None, choices=DEVICES, noun="device", help="cpu or cuda [default: cuda for nccl/ucc, else cpu].")
    nproc: int = option(
        2, minimum=1,
        help="Local ranks to spawn when no launcher (torchrun, mpirun, srun) started commbench.")
    timeout_s: float = option(
        300.0, flag="--timeout", above=0, bounds="must be above 0 seconds",
        help="Seconds allowed for process-group start, each collective and each size's check-in.")
    group_size: int | None = option(
        None, only=(SWEEP,),
        help="Split the world into groups of this many ranks that run each collective at once (bandwidth is "
             "per group).")
    group_layout: str | None = option(
        None, only=(SWEEP,), choices=LAYOUTS,
        help="contiguous (ranks 0..K-1, K..2K-1, ...) or strided (r, r+G, r+2G, ... for G groups) [default: "
             "contiguous].")
    groups: str | None = option(
        None, only=(SWEEP,), choices=PRESETS,
        help="Groups from the ranks' hosts: intra-node (the ranks of each host) or inter-node (one rank per "
             "host).")
    output_dir: str = option("results", help="Each run writes DIR/<run-id>/results.csv and results.json.")
    csv_path: str | None = option(None, flag="--csv", help="Write the CSV exactly here instead (and without "
                                  "--json the JSON beside it, X.json, where commbench.load finds it).")
    json_path: str | None = option(None, flag="--json", help="Write the JSON exactly here instead.")
    output_format: str = option(
        "table", flag="--format", only=(SWEEP,), choices=OUTPUT_FORMATS, noun="format",
        help=f"Console output: {', '.join(OUTPUT_FORMATS)} (nccl-tests' columns; JSON lines on stdout).")
    quiet: bool = option(False, help="Print no tables or notes: only errors, warnings and, on stderr, where "
                                     "the files are.")
    per_rank: bool = option(
        False, only=(SWEEP,), help="Print each rank's mean time and arrival skew per size.")
    skew_threshold_percent: float = option(
        25.0, flag="--skew-threshold", only=(SWEEP,), minimum=0, bounds="must not be negative",
        help="Name the slowest rank when a rank's arrival skew exceeds this percentage of the p50 time.")
    nccl_debug: bool = option(  # rows get NCCL's choices (provenance)
        False, only=(SWEEP,),
        help="Run with NCCL's INFO log (INIT, TUNING, COLL) in per-rank files beside the results; rows get "
             "NCCL's algorithm, protocol, channels and transport.")
    expect: str | None = option(
        None, only=(SWEEP,), metavar="FILE|NAME",
        help="Judge each row PASS, WARN or FAIL against a baseline: a YAML file or a name from "
             "configs/baselines.yaml (docs/provenance.md).")
    fail_below: float | None = option(  # its range: provenance.baselines.check_judging
        None, only=(SWEEP,), metavar="PCT",
        help="Exit 1 when a row's busbw is below PCT percent of its --expect busbw, or without --expect of "
             "its link peak.")
    duration_s: float | None = option(
        None, flag="--duration", only=(SOAK,), metavar="TIME", parse=parse_duration, above=0,
        bounds="must be above 0 seconds",
        help="Soak: repeat the run until this much time (90s, 10m, 1h30m) has passed; drift and spikes are "
             "reported.")
    passes: int | None = option(  # alone: exactly this many passes
        None, flag="--repeat", only=(SOAK,), metavar="N", minimum=1,
        help="Soak: run N times (with --duration: at most N times).")
    argv: list[str] = field(default_factory=list)  # the command line, recorded with results


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
    check_options(launch)
    check_group_options(launch.group_size, launch.group_layout, launch.groups)
    check_judging(launch.expect, launch.fail_below)
    backend, device = resolve_backend_and_device(launch.backend, launch.device)
    json_path = launch.json_path or json_beside(launch.csv_path)
    return replace(launch, backend=backend, device=device, json_path=json_path)


def json_beside(csv_path: str | None) -> str | None:
    """Where the JSON goes when only --csv is given: beside it, X.json for X.csv, as readers of X.csv look
    for its metadata (results/saved.py), not in a run directory elsewhere."""
    if not csv_path:
        return None
    path = Path(csv_path)
    if path.suffix.lower() == ".json":  # `--csv r.json`: not the CSV's own name
        return str(path.with_name(path.name + ".json"))
    return str(path.with_suffix(".json"))


def resolve_backend_and_device(backend: str | None, device: str | None) -> tuple[str, str]:
    """The backend and device to run on, given ones a config has checked (``check_options``): the
    defaults filled in, UsageError when this machine cannot run them."""
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
