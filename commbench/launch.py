"""Launch: who am I (torchrun, mpirun, srun, or nobody), and one rank's start-up: device, backend, process
group, sub-communicators, recording, then the work, and how the run ends.

This is the one module that reads environment variables (spawn.py sets them for the ranks it starts).
Nobody launched us: spawn.py starts local ranks that re-run the same command line.
"""

import os
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench import devices
from commbench.backends.base import Backend
from commbench.backends.coordination import CheckInFailed
from commbench.config import Benchmark, LaunchConfig
from commbench.errors import AlreadyReported, RunError, Terminated, UsageError, brief
from commbench.groups import GroupPlan, Membership, split_by_hosts, split_world, world_plan
from commbench.output import NullOutput, Output
from commbench.placement import host_name, memory_budget, place
from commbench.provenance.describe import hardware_summary
from commbench.provenance.run import RunProvenance
from commbench.recording import Recording, build_meta
from commbench.results import Row
from commbench.runner import Session, sweep_failure
from commbench.sizes import parse_size
from commbench.spawn import LAUNCHER_ENV, spawn_local

if TYPE_CHECKING:
    from commbench.backends.rendezvous import Rendezvous

# What a rank runs once its backend is up: a sweep's benchmarks, or a workload pattern
# (commbench.patterns); the first benchmark's launch settings are the run's.
Work = Callable[[list[Any], Backend, Output, Session], list[Row]]
# Test-only: "RANK:SIZE" makes that rank leave SIZE out of its sweep, as a rank whose sweep diverged
# would; the others must then time out at that size and name it.
TEST_SKIP_ENV = "COMMBENCH_TEST_SKIP"
FAILURE_GRACE_S = 2.0  # how long a failed rank waits to hear what became of the others


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


def launch(benchmarks: Sequence[Benchmark], work: Work, environ: Mapping[str, str] | None = None) -> int:
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
    from commbench.console import make_console
    from commbench.probe import print_support, probe_all

    environ = os.environ if environ is None else environ
    info = detect(environ, setup.backend)
    if info is None:
        nproc = setup.nproc
        if setup.device == "cuda":
            import torch

            nproc = min(nproc, torch.cuda.device_count())
        return spawn_local(setup.argv, nproc)
    backend = start_backend(setup, info, environ)
    try:
        probes = probe_all(backend)
        if info.rank == 0:
            print_support(make_console(), probes, backend)
        backend.barrier()
    finally:
        backend.shutdown()
    return 0


def rendezvous_of(info: RankInfo, environ: Mapping[str, str]) -> "Rendezvous":
    from commbench.backends.rendezvous import Rendezvous

    # Under torchrun the agent hosts the store at MASTER_PORT, and a restart reuses it.
    return Rendezvous(info.rank, info.world_size, info.master_addr or "", info.master_port or 0,
                      launcher_hosts_store=environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
                      attempt=environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def start_backend(setup: LaunchConfig, info: RankInfo, environ: Mapping[str, str]) -> Backend:
    """Meet the other ranks at the store, agree on devices, then start the process group."""
    from commbench.backends.rendezvous import StartUp
    from commbench.backends.torch_dist import TorchDistBackend

    name = setup.backend or "gloo"
    startup = StartUp(name, rendezvous_of(info, environ), setup.timeout_s)
    try:
        startup.meet()
        device = place(setup, (info.rank, info.local_rank), environ, startup)
        return TorchDistBackend(name, device, startup.start(device))
    except (RunError, UsageError, AlreadyReported):
        raise
    except Exception as exc:
        raise RunError(f"rank {info.rank}: the {name} process group did not start "
                       f"(MASTER_ADDR={info.master_addr}, MASTER_PORT={info.master_port}, "
                       f"timeout {setup.timeout_s:g} s): {brief(exc)}") from exc


def split_into_groups(setup: LaunchConfig, hostnames: list[str]) -> GroupPlan:
    """The run's sub-communicators; presets need every rank's host name, so this runs after the start."""
    if setup.groups is not None:
        return split_by_hosts(hostnames, setup.groups)
    if setup.group_size is not None:
        return split_world(len(hostnames), setup.group_size, setup.group_layout or "contiguous")
    return world_plan(len(hostnames))


def join_groups(backend: Backend, plan: GroupPlan) -> Membership:
    process_group = None
    if not plan.is_world:
        try:
            process_group = backend.new_groups([list(ranks) for ranks in plan.members])
        except Exception as exc:
            raise RunError(f"rank {backend.rank} could not create the {plan.describe()}: "
                           f"{brief(exc)}") from exc
    return Membership(plan, process_group, plan.group_rank(backend.rank))


class StopRequests:
    """SIGINT/SIGTERM on a rank: the first asks the work to stop at its next boundary (the sweep: the
    next size, where every rank agrees, so none is left waiting in a collective); a second stops this
    rank at once. Work that never asks (a pattern), or a signal before the work first asks, stops at
    once too."""

    def __init__(self) -> None:
        self.signum = 0
        self.polled = False
        self.done = False  # the work is over: a late signal does not turn a complete run into a stopped one

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.done:
            return
        if self.signum or not self.polled:
            raise Terminated(signum)
        self.signum = signum

    def requested(self) -> int:
        self.polled = True
        return self.signum


def skipped_size(info: RankInfo, environ: Mapping[str, str]) -> int | None:
    """COMMBENCH_TEST_SKIP=RANK:SIZE (tests only): the size this rank's sweeps leave out."""
    spec = environ.get(TEST_SKIP_ENV)
    if not spec:
        return None
    rank_text, _, size_text = spec.partition(":")
    return parse_size(size_text) if int(rank_text) == info.rank else None


def run_rank(benchmarks: list[Benchmark], info: RankInfo, environ: Mapping[str, str], work: Work) -> int:
    for benchmark in benchmarks:
        benchmark.check_world(info.world_size)
    setup = benchmarks[0].launch
    stops = StopRequests()
    stops.install()
    # NCCL reads its debug variables once, when the backend starts it: they are set before.
    provenance = RunProvenance(setup, os.environ)
    backend = start_backend(setup, info, environ)
    recording: Recording | None = None
    try:
        hostnames = backend.all_gather_object(host_name(environ))
        plan = split_into_groups(setup, hostnames)
        membership = join_groups(backend, plan)
        hardware = provenance.gather_hardware(backend, hostnames)
        if info.rank == 0:
            meta = build_meta(benchmarks, backend, hostnames, environ, plan, info.launcher)
            meta.hardware = hardware
            recording = Recording(meta, setup)
            recording.note(hardware_summary(hardware))
        members = [list(ranks) for ranks in plan.members]
        context = provenance.start_rows(backend, hostnames, members, recording)
        session = Session(membership, stops.requested, skipped_size(info, environ), context,
                          memory_budget(backend, hostnames), hostnames=tuple(hostnames))
        rows = work(benchmarks, backend, recording or NullOutput(), session)
        backend.barrier()
        stops.done = True
    except BaseException as exc:
        if recording is not None:
            recording.close_console()
        raise _finish_failed(exc, info, backend, recording, setup) from exc
    # Rows that failed or held wrong values were all measured and kept; the run then exits 1.
    failure = sweep_failure(rows)
    below = provenance.finish(rows, recording)
    failure = "; ".join(text for text in (failure, below) if text) or None
    if recording is not None:
        recording.finish("failed" if failure else "complete", failure)
        recording.show_files()
    backend.shutdown()
    if failure is not None:
        if info.rank == 0:
            raise RunError(failure)
        return 1
    return 0


def _finish_failed(exc: BaseException, info: RankInfo, backend: Backend, recording: Recording | None,
                   setup: LaunchConfig) -> BaseException:
    """Record how the run ended (rank 0's files) and return what to raise for the exit status."""
    if isinstance(exc, Terminated | KeyboardInterrupt):
        signum = exc.exit_code - 128 if isinstance(exc, Terminated) else signal.SIGINT
        if recording is not None:
            recording.interrupted(signal.Signals(signum).name)
        backend.abort()  # a collective may still wait on the device for a peer that stopped
        return exc
    if isinstance(exc, UsageError):
        if recording is not None:
            recording.finish("failed", str(exc))
        # Every rank stops here, so the group can be released cleanly: a process that exits with
        # gloo's threads still running aborts ("terminate called without an active exception").
        backend.shutdown()
        # Every rank finds the same problem with the same input: one message, from rank 0.
        return exc if info.rank == 0 else AlreadyReported(exc.exit_code)
    if isinstance(exc, RunError):
        error = _with_peer_accounts(exc, backend, setup)
        if recording is not None:
            recording.finish("failed", error)
        backend.abort()  # recorded first: aborting a communicator may end the process (NCCL's watchdog)
        return RunError(error)
    if recording is not None:
        recording.finish("failed", f"{type(exc).__name__}: {exc}")
    backend.abort()
    return exc


def _with_peer_accounts(exc: RunError, backend: Backend, setup: LaunchConfig) -> str:
    """The error, with what the other ranks said (or did not say) about themselves.

    Telling the others also keeps rank 0, whose process may host the store, alive until they have
    read what they need from it.
    """
    error = str(exc)
    accounts = backend.account_for_failure(error, min(FAILURE_GRACE_S, setup.timeout_s))
    if isinstance(exc, CheckInFailed):  # its message already says where every missing rank is
        return error
    return f"{error}; {accounts}" if accounts and accounts not in error else error
