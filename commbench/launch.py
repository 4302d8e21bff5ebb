"""Launch: who am I (torchrun, mpirun, srun, or nobody), and what runs: a launched rank goes on to
rank.py (start-up, the work, how the run ends); nobody launched us: spawn.py starts local ranks that
re-run the same command line.

With rank.py, this is where environment variables are read (spawn.py sets them for the ranks it
starts). It imports no torch: a spawning launcher only checks the command line and starts the ranks,
which import torch themselves (seconds each).
"""

import importlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench import devices
from commbench.config import Benchmark, LaunchConfig
from commbench.errors import UsageError
from commbench.spawn import LAUNCHER_ENV, spawn_local

if TYPE_CHECKING:
    from commbench.rank import Work


def deferred(module: str, name: str, **bound: Any) -> "Work":
    """The work ``module.name`` (called with ``bound`` keyword arguments too), imported on the rank that
    runs it: work modules import torch, which a launcher that only spawns ranks never needs."""

    def work(*args: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **bound)

    work.__qualname__ = f"{module}.{name}"
    return work


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int | None  # None: no launcher said; derived from the host names once the ranks meet
    launcher: str
    master_addr: str | None
    master_port: int | None


# (launcher, rank, world size) variable names, in order of precedence. The local rank has its own order
# (devices.LOCAL_RANK_VARIABLES): one launcher may set the rank and another the local rank (Cray MPICH
# under srun sets PMI_RANK and SLURM_LOCALID, no MPI_LOCALRANKID).
_LAUNCHER_VARIABLES = [
    ("torchrun", "RANK", "WORLD_SIZE"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("mpirun", "PMI_RANK", "PMI_SIZE"),
    ("mpirun", "PMIX_RANK", "PMIX_SIZE"),
    ("mpirun", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS"),
    ("flux", "FLUX_TASK_RANK", "FLUX_JOB_SIZE"),
]


def _int_variable(env: Mapping[str, str], name: str) -> int:
    value = env.get(name)
    if value is None:
        raise UsageError(f"{name} is not set")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"environment variable {name}={value!r} is not an integer") from None


def detect(env: Mapping[str, str], backend: str | None = None) -> RankInfo | None:
    """This process's place in the job from the launcher's variables, or None when not launched."""
    for launcher, rank_var, world_var in _LAUNCHER_VARIABLES:
        if rank_var not in env or world_var not in env:
            continue
        if launcher == "srun":
            step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
            if step is None or step in devices.SLURM_BATCH_STEPS:
                continue  # a batch script, not a task started by srun
            world_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else world_var
        if launcher == "torchrun":
            launcher = env.get(LAUNCHER_ENV) or ("torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        rank = _int_variable(env, rank_var)
        world_size = _int_variable(env, world_var)
        local_rank = devices.local_rank_from(env)
        if world_size < 1 or not 0 <= rank < world_size:
            raise UsageError(f"{rank_var}={rank} does not fit {world_var}={world_size}")
        master_addr, master_port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
        if backend != "mpi" and (not master_addr or not master_port):
            missing = " and ".join(n for n, v in (("MASTER_ADDR", master_addr),
                                                  ("MASTER_PORT", master_port)) if not v)
            raise UsageError(f"launched by {launcher} ({rank_var} is set) but {missing} is not: export "
                             "MASTER_ADDR=<host of rank 0> MASTER_PORT=<free port>, e.g. 29500")
        port = _int_variable(env, "MASTER_PORT") if master_port else None
        return RankInfo(rank, world_size, local_rank, launcher, master_addr, port)
    return None


def check_local_launch(benchmarks: Sequence[Benchmark]) -> None:
    """What the spawner can check before starting ranks."""
    setup = benchmarks[0].launch
    for benchmark in benchmarks:
        benchmark.check_world(setup.nproc)
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
        return spawn_local(setup.argv, setup.nproc)
    if info.rank == 0:
        check_output_location(setup)
    from commbench.rank import run_rank

    return run_rank(list(benchmarks), info, environ, work)


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


def check_output_location(setup: LaunchConfig) -> None:
    """UsageError, before any rank starts, when the results cannot be written where asked."""
    exact = (("--csv", setup.csv_path), ("--json", setup.json_path))
    files = [(flag, Path(path)) for flag, path in exact if path]
    for flag, path in files:
        if path.is_dir():
            raise UsageError(f"{flag} {path} is a directory: give the file to write")
    directories = [(flag, path.parent) for flag, path in files]
    if len(files) < 2:  # a file not given exactly goes under --output-dir
        directories.append(("--output-dir", Path(setup.output_dir)))
    for flag, directory in directories:
        if directory.exists() and not directory.is_dir():
            raise UsageError(f"{flag}: {directory} is a file, not a directory")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=directory):
                pass
        except OSError as exc:
            raise UsageError(f"{flag}: cannot write results in {directory}: {exc.strerror or exc}") from None


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
        return spawn_local(setup.argv, nproc)
    from commbench.console import make_console
    from commbench.probe import print_support, probe_all
    from commbench.rank import start_backend

    backend = start_backend(setup, info, environ)
    try:
        probes = probe_all(backend)
        if info.rank == 0:
            print_support(make_console(), probes, backend)
        backend.barrier()
    finally:
        backend.shutdown()
    return 0
