"""Launch: who am I (torchrun, mpirun, srun, or nobody), and what runs: a launched rank goes on to
rank.py (start-up, the work, how the run ends); nobody launched us: spawn.py starts local ranks that
re-run the same command line.

With rank.py, this is where environment variables are read (spawn.py sets them for the ranks it
starts). It imports no torch: a spawning launcher only checks the command line and starts the ranks,
which import torch themselves (seconds each).
"""

import importlib
import os
import resource
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.config.launch import Benchmark, LaunchConfig
from commbench.errors import UsageError
from commbench.running.launcher import detect
from commbench.running.spawn import spawn_local
from commbench.writers.paths import check_directory, check_file, check_not_an_input, files_named, held_files

if TYPE_CHECKING:
    from commbench.running.rank import Work


def deferred(module: str, name: str, **bound: Any) -> "Work":
    """The work ``module.name`` (called with ``bound`` keyword arguments too), imported on the rank that
    runs it: work modules import torch, which a launcher that only spawns ranks never needs."""

    def work(*args: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **bound)

    work.__qualname__ = f"{module}.{name}"
    return work


# Local ranks per CPU core the spawner starts at most: beyond, a rank spends the run waiting for a core
# (a run of 32 ranks on 2 cores already needed 64 s for a failed rank's peers to exit).
MAX_RANKS_PER_CORE = 16
# Threads one rank runs (Python, torch's pools, gloo's transport, the store's requests): RLIMIT_NPROC
# counts threads, so a spawn that would need more than the limit allows is refused before it starts.
THREADS_PER_RANK = 16


def check_local_ranks(nproc: int, device: str) -> None:
    """UsageError, before any rank starts, when ``nproc`` local ranks are more than this machine runs:
    on CPU, more than MAX_RANKS_PER_CORE per core; anywhere, more threads than the process limit allows
    (a spawn past it fails part way and leaves ranks behind)."""
    cores = len(os.sched_getaffinity(0))
    if device != "cuda" and nproc > MAX_RANKS_PER_CORE * cores:
        raise UsageError(f"--nproc {nproc}: at most {MAX_RANKS_PER_CORE * cores} local ranks on {cores} CPU "
                         f"cores ({MAX_RANKS_PER_CORE} per core; docs/limits.md)")
    threads, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if threads != resource.RLIM_INFINITY and nproc * THREADS_PER_RANK > threads:
        raise UsageError(f"--nproc {nproc}: {nproc} ranks run about {nproc * THREADS_PER_RANK} threads, more "
                         f"than the process limit of {threads} (ulimit -u; docs/limits.md)")


def check_local_launch(benchmarks: Sequence[Benchmark]) -> None:
    """What the spawner can check before starting ranks."""
    setup = benchmarks[0].launch
    for benchmark in benchmarks:
        benchmark.check_world(setup.nproc)
    check_local_ranks(setup.nproc, setup.device or "cpu")
    if setup.device == "cuda":
        import torch

        if setup.nproc > torch.cuda.device_count():
            raise UsageError(f"--nproc {setup.nproc} needs {setup.nproc} CUDA devices (one per rank); "
                             f"this machine has {torch.cuda.device_count()}")


def launch(benchmarks: Sequence[Benchmark], work: "Work", environ: Mapping[str, str] | None = None) -> int:
    """Run ``work`` over ``benchmarks`` in one process group: as one rank of a launched job, or by
    spawning local ranks that re-run the same command line."""
    environ = os.environ if environ is None else environ
    setup = benchmarks[0].launch
    info = detect(environ, setup.backend)
    if info is None:
        check_local_launch(benchmarks)
        check_output_location(setup)
        announce_local_ranks(setup)
        with held_files(exact_files(setup)):  # the spawner holds them for its ranks (launcher "local")
            warn_replaced(exact_files(setup))  # once they are this run's: a refused run replaces nothing
            return spawn_local(setup.argv, setup.nproc)
    if info.rank == 0:
        check_output_location(setup)
    from commbench.running.rank import run_rank

    holds = info.rank == 0 and info.launcher != "local"
    with held_files(exact_files(setup) if holds else []):
        if holds:  # (under our own spawner, the spawner said it)
            warn_replaced(exact_files(setup))
        return run_rank(list(benchmarks), info, environ, work)


def exact_files(setup: LaunchConfig) -> list[tuple[str, Path]]:
    """The result files named exactly (--csv, --json), which another run may be given too; a run
    directory's name is new for every run."""
    return [(flag, Path(path)) for flag, path in (("--csv", setup.csv_path), ("--json", setup.json_path))
            if path]


def replaced_files(exact: list[tuple[str, Path]]) -> list[str]:
    """A warning for each result file named exactly that already holds something: the run replaces it
    (an earlier run's rows, which a second `--csv r.csv` used to overwrite without a word)."""
    return [f"commbench: warning: {flag} {path} already holds results: this run replaces them"
            for flag, path in exact if path.is_file() and path.stat().st_size > 0]


def warn_replaced(exact: list[tuple[str, Path]]) -> None:
    for line in replaced_files(exact):
        print(line, file=sys.stderr, flush=True)


def announce_local_ranks(setup: LaunchConfig) -> None:
    """Before the ranks start (seconds, with torch to import): say so to a person at a terminal, and
    warn when they outnumber the cores they will share, since every time measured then includes
    waiting for a core."""
    cores = len(os.sched_getaffinity(0))
    if setup.device == "cpu" and setup.nproc > cores:
        print(f"commbench: warning: {setup.nproc} local ranks share {cores} CPU cores, so every time "
              f"includes waiting for a core; use --nproc {cores} or fewer for meaningful numbers",
              file=sys.stderr, flush=True)
    if not setup.quiet and sys.stderr.isatty():
        print(f"commbench: starting {setup.nproc} local ranks ({setup.backend} on {setup.device})",
              file=sys.stderr, flush=True)


# The options whose values are where output goes, not inputs (the inputs are the command line's other
# files: a sweep file, --splits, --expect, --model, a recording's files).
OUTPUT_OPTIONS = ("--json", "--csv", "--output-dir")


def check_output_location(setup: LaunchConfig) -> None:
    """UsageError, before any rank starts, when the results cannot be written where asked: a place that
    takes no file, a FIFO for the JSON (rewritten as it grows), both files the same, or a file the
    command line names as an input."""
    exact = exact_files(setup)
    for flag, path in exact:
        check_file(flag, path, "results.json" if flag == "--json" else "results", rewritten=flag == "--json")
    if len(exact) == 2 and os.path.realpath(exact[0][1]) == os.path.realpath(exact[1][1]):
        raise UsageError(f"--csv and --json both name {exact[0][1]}: give each its own file")
    inputs = files_named(setup.argv, skip=OUTPUT_OPTIONS)
    for flag, path in exact:
        check_not_an_input(flag, path, inputs)
    if len(exact) < 2:  # a file not given exactly goes under --output-dir
        check_directory("--output-dir", Path(setup.output_dir))


def launch_list(setup: LaunchConfig, environ: Mapping[str, str] | None = None) -> int:
    """`commbench list`: probe the backend on the launched ranks, or on ``setup.nproc`` spawned ones
    (on CUDA at most one per device)."""
    environ = os.environ if environ is None else environ
    info = detect(environ, setup.backend)
    if info is None:
        nproc = setup.nproc
        if setup.device == "cuda":
            import torch

            nproc = min(nproc, torch.cuda.device_count())
        check_local_ranks(nproc, setup.device or "cpu")
        return spawn_local(setup.argv, nproc)
    from commbench.running.probe import print_support, probe_all
    from commbench.running.rank import start_backend
    from commbench.writers.console import make_console

    backend = start_backend(setup, info, environ)
    try:
        probes = probe_all(backend)
        if info.rank == 0:
            print_support(make_console(), probes, backend)
        backend.barrier()
    finally:
        backend.shutdown()
    return 0
