"""Launch: who am I (torchrun, mpirun, srun, or nobody), spawning local ranks when nobody launched us,
and setting up the device, the backend and the process group once for the rest of the run.

This is the one module that reads environment variables.
"""

import ctypes
import multiprocessing
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from commbench import __version__
from commbench.backends.base import Backend
from commbench.backends.coordination import CheckInFailed, announce_death
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config import RunConfig, split_spec
from commbench.errors import AlreadyReported, RunError, Terminated, UsageError, brief
from commbench.fit import fit_rows
from commbench.formats import Reporter, make_reporter
from commbench.groups import GroupPlan, Membership, format_ranks, split_by_hosts, split_world, world_plan
from commbench.provenance.describe import hardware_summary
from commbench.provenance.run import ProvenanceOptions, RunProvenance
from commbench.results import ResultWriter, Row, RunMeta
from commbench.runner import NullOutput, Output, Session, run_benchmarks, sweep_failure
from commbench.sizes import parse_size
from commbench.splits import check_world_size

# What a rank runs once its backend is up: a sweep's benchmarks, or a workload pattern
# (commbench.patterns). The configs are RunConfigs or a pattern's config with the same launch fields;
# the first one's launch fields (backend, device, files, ...) are the run's.
Work = Callable[[list[Any], Backend, Output, Session], object]
LAUNCHER_ENV = "COMMBENCH_LAUNCHER"  # set by our own spawner on the ranks it starts
HOSTNAME_ENV = "COMMBENCH_HOSTNAME"  # the host name a rank reports, when the system's says too little
# Test-only: "RANK:SIZE" makes that rank leave SIZE out of its sweep, as a rank whose sweep diverged
# would; the others must then time out at that size and name it.
TEST_SKIP_ENV = "COMMBENCH_TEST_SKIP"
FAILURE_GRACE_S = 2.0  # how long a failed rank waits to hear what became of the others
RECORDED_ENV_PREFIXES = ("COMMBENCH_", "NCCL_", "TORCH_", "GLOO_", "UCC_", "UCX_", "CUDA_VISIBLE_DEVICES",
                         "OMP_NUM_THREADS")


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    launcher: str
    master_addr: str | None
    master_port: int | None


# (launcher, rank, world size, local rank) variable names, in order of precedence.
_LAUNCHER_VARIABLES = [
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("mpirun", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"),
    ("mpirun", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
]
_SLURM_BATCH_STEP = {"batch", "4294967294"}


def _int_variable(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None:
        if default is None:
            raise UsageError(f"{name} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"environment variable {name}={value!r} is not an integer") from None


def detect(env: Mapping[str, str], backend: str | None = None) -> RankInfo | None:
    """This process's place in the job from the launcher's variables, or None when not launched."""
    for launcher, rank_var, world_var, local_var in _LAUNCHER_VARIABLES:
        if rank_var not in env or world_var not in env:
            continue
        if launcher == "srun":
            step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
            if step is None or step in _SLURM_BATCH_STEP:
                continue  # a batch script, not a task started by srun
            world_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else world_var
        if launcher == "torchrun":
            launcher = env.get(LAUNCHER_ENV) or ("torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        rank = _int_variable(env, rank_var)
        world_size = _int_variable(env, world_var)
        local_rank = _int_variable(env, local_var, default=0)
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


# --- the no-launcher path: spawn local ranks ----------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """In a spawned rank: get SIGTERM if the spawner dies, so no rank is ever orphaned (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _exit_status(code: int) -> int:
    """A child's return code as a shell would report it (killed by signal N -> 128 + N)."""
    return 128 - code if code < 0 else code


def spawn_local(argv: list[str], nproc: int, grace_s: float = 10.0, failure_grace_s: float = 4.0) -> int:
    """Run ``python -m commbench ARGV`` as ``nproc`` local ranks; their exit status is ours.

    After a signal the ranks get ``grace_s`` to finish their size and stop together; when one rank
    fails the others get ``failure_grace_s`` to notice and exit on their own. Then they are stopped
    (SIGTERM, then SIGKILL), and a rank that had to be stopped after a failure is named as hung;
    a rank killed by a signal is announced to the others through the rendezvous store, so their
    messages say which rank died. SIGINT and SIGTERM are forwarded (the ranks stop together at the
    next size, or at once on a second signal); ranks run in their own process group so a terminal's
    Ctrl-C reaches them once, through us, and die with us (PR_SET_PDEATHSIG) if we are killed.
    """
    port = free_port()
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: N ranks on one host share its cores
    procs: list[subprocess.Popen] = []
    for rank in range(nproc):
        rank_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                    "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    LAUNCHER_ENV: "local"}
        procs.append(subprocess.Popen([sys.executable, "-m", "commbench", *argv], env=rank_env,
                                      process_group=0, preexec_fn=_die_with_parent))

    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _wait_for_ranks(procs, grace_s, failure_grace_s, received, port)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _wait_for_ranks(procs: list[subprocess.Popen], grace_s: float, failure_grace_s: float,
                    received: list[int], port: int) -> int:
    first_failure: tuple[int, int] | None = None
    deadline: float | None = None
    stopping = False
    stopped: list[int] = []  # ranks we had to stop after a failure: they were hung
    announced: set[int] = set()
    while True:
        codes = [proc.poll() for proc in procs]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        for rank, code in failed:
            # A death we did not cause: tell the others which rank it was (rank 0 hosts the store, so
            # its death cannot be told; the others find out when the store goes).
            if code < 0 and not stopping and not received and rank not in announced:
                announced.add(rank)
                if rank != 0:
                    announce_death("127.0.0.1", port, "0", rank, signal.Signals(-code).name)
        if first_failure is None and failed and not received:
            # Of ranks found failed at once, one killed by a signal is the cause, the others its effect.
            first_failure = min(failed, key=lambda item: (item[1] >= 0, item[0]))
            deadline = time.monotonic() + failure_grace_s
        if all(code is not None for code in codes):
            break
        if received and deadline is None:
            deadline = time.monotonic() + grace_s
        if deadline is not None and time.monotonic() > deadline:
            for rank, proc in enumerate(procs):
                if proc.poll() is None:
                    if not stopping and not received:
                        stopped.append(rank)
                    (proc.kill if stopping else proc.terminate)()
            stopping, deadline = True, time.monotonic() + 2.0
        time.sleep(0.05)
    if received:
        return 128 + received[0]
    if first_failure is None:
        return 0
    rank, code = first_failure
    if stopped:
        print(f"commbench: error: {format_ranks(stopped)} did not stop within {failure_grace_s:g} s of "
              f"rank {rank} failing (hung): stopped by the launcher", file=sys.stderr)
    if code < 0:
        print(f"commbench: error: rank {rank} died ({signal.Signals(-code).name})", file=sys.stderr)
        return 1
    return code


def check_world(config: RunConfig, world_size: int) -> None:
    """What can be checked once the world size is known, before any process group starts."""
    root = getattr(config, "root", 0)  # pattern configs have no root and no groups
    group_size = getattr(config, "group_size", None)
    if group_size is not None:
        plan = split_world(world_size, group_size, config.group_layout or "contiguous")
        if root >= plan.size and not plan.is_world:
            raise UsageError(f"--root {root} is outside a group of {plan.size} ranks")
    if root >= world_size:
        raise UsageError(f"--root {root} is outside the world of {world_size} ranks")
    if getattr(config, "split_matrix", None) is not None:  # a splits file must be n x n, n the group size
        check_world_size(split_spec(config), group_size or world_size)


def _function_rank(fn: Callable, rank: int, world_size: int, port: int, args: tuple, results: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        backend = TorchDistBackend.create("gloo", torch.device("cpu"), rank, world_size, "127.0.0.1", port,
                                          timeout_s=120)
        value = fn(rank, world_size, *args)
        backend.barrier()
        backend.shutdown()
        results.put((rank, None, value))
    except BaseException:
        results.put((rank, traceback.format_exc(), None))


def run_on_local_ranks(fn: Callable, world_size: int, *args: Any, timeout_s: float = 300.0) -> list[Any]:
    """``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined in a gloo group; the
    values they return, by rank. For scripts and tests that drive commbench's pieces directly.
    ``fn`` must be importable (a module-level function)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    procs = [context.Process(target=_function_rank, args=(fn, rank, world_size, port, args, results))
             for rank in range(world_size)]
    for proc in procs:
        proc.start()
    values: dict[int, Any] = {}
    failure: str | None = None
    try:
        while len(values) < world_size and failure is None:
            rank, error, value = results.get(timeout=timeout_s)
            if error is None:
                values[rank] = value
            else:
                failure = f"rank {rank} failed:\n{error}"
    finally:
        for proc in procs:
            proc.join(timeout=1 if failure else 10)
            if proc.is_alive():
                proc.kill()
    if failure is not None:
        raise RuntimeError(failure)
    return [values[rank] for rank in range(world_size)]


def check_local_launch(configs: list[Any]) -> None:
    """What the spawner can check before starting ranks."""
    config = configs[0]
    for benchmark in configs:
        check_world(benchmark, config.nproc)
    if config.device == "cuda" and config.nproc > torch.cuda.device_count():
        raise UsageError(f"--nproc {config.nproc} needs {config.nproc} CUDA devices (one per rank); "
                         f"this machine has {torch.cuda.device_count()}")


# --- one rank's run -----------------------------------------------------------------------------

def launch(configs: list[Any], environ: Mapping[str, str] | None = None,
           work: Work = run_benchmarks) -> int:
    """Run ``work`` (a sweep's benchmarks by default) in one process group: as one rank of a launched
    job, or by spawning local ranks that re-run the same command line."""
    environ = os.environ if environ is None else environ
    config = configs[0]
    info = detect(environ, config.backend)
    if info is None:
        check_local_launch(configs)
        return spawn_local(config.argv, config.nproc)
    return run_rank(configs, info, environ, work)


def launch_list(config: RunConfig, environ: Mapping[str, str] | None = None) -> int:
    """`commbench list`: probe the backend on the launched ranks, or on ``config.nproc`` spawned ones
    (on CUDA at most one per device)."""
    from commbench.console import make_console
    from commbench.probe import print_support, probe_all

    environ = os.environ if environ is None else environ
    info = detect(environ, config.backend)
    if info is None:
        nproc = min(config.nproc, torch.cuda.device_count()) if config.device == "cuda" else config.nproc
        return spawn_local(config.argv, nproc)
    backend = start_backend(config, info, environ)
    try:
        probes = probe_all(backend)
        if info.rank == 0:
            print_support(make_console(), probes, backend)
        backend.barrier()
    finally:
        backend.shutdown()
    return 0


def select_device(config: RunConfig, info: RankInfo) -> torch.device:
    if config.device != "cuda":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if info.local_rank >= count:
        raise UsageError(f"rank {info.rank} has local rank {info.local_rank} but this host has {count} "
                         "CUDA devices: start at most one rank per device")
    return torch.device("cuda", info.local_rank)


def start_backend(config: RunConfig, info: RankInfo, environ: Mapping[str, str]) -> Backend:
    device = select_device(config, info)
    # Under torchrun the agent hosts the store at MASTER_PORT, and a restart reuses it.
    launcher_hosts_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    attempt = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    try:
        return TorchDistBackend.create(config.backend, device, info.rank, info.world_size,
                                       info.master_addr or "", info.master_port or 0, config.timeout_s,
                                       launcher_hosts_store, attempt)
    except RunError:
        raise
    except Exception as exc:
        detail = brief(exc)
        raise RunError(f"rank {info.rank}: the {config.backend} process group did not start "
                       f"(MASTER_ADDR={info.master_addr}, MASTER_PORT={info.master_port}, "
                       f"timeout {config.timeout_s:g} s): {detail}") from exc


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def make_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def split_into_groups(config: RunConfig, hostnames: list[str]) -> GroupPlan:
    """The run's sub-communicators; presets need every rank's host name, so this runs after the start."""
    world_size = len(hostnames)
    if getattr(config, "groups", None) is not None:
        return split_by_hosts(hostnames, config.groups)
    if getattr(config, "group_size", None) is not None:
        return split_world(world_size, config.group_size, config.group_layout or "contiguous")
    return world_plan(world_size)


def join_groups(backend: Backend, plan: GroupPlan) -> Membership:
    handle = None
    if not plan.is_world:
        try:
            handle = backend.new_groups([list(ranks) for ranks in plan.members])
        except Exception as exc:
            raise RunError(f"rank {backend.rank} could not create the {plan.describe()}: "
                           f"{brief(exc)}") from exc
    return Membership(plan, handle, plan.group_rank(backend.rank))


def _config_record(config: Any) -> dict:
    return {key: value for key, value in asdict(config).items() if key != "argv"}


def build_meta(configs: list[Any], info: RankInfo, backend: Backend, hostnames: list[str],
               environ: Mapping[str, str], plan: GroupPlan | None = None) -> RunMeta:
    config = configs[0]
    recorded = {key: value for key, value in sorted(environ.items())
                if key.startswith(RECORDED_ENV_PREFIXES)}
    return RunMeta(
        run_id=make_run_id(),
        started_at=_now(),
        command=["commbench", *config.argv],
        commbench_version=__version__,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        backend=backend.name,
        device=str(backend.device.type),
        world_size=info.world_size,
        launcher=info.launcher,
        hostnames=hostnames,
        versions=backend.versions(),
        env=recorded,
        config=_config_record(config),
        benchmarks=[_config_record(benchmark) for benchmark in configs],
        groups=(plan or world_plan(info.world_size)).as_dict(),
    )


class RecordingOutput:
    """Rank 0's output: every row to the files as it arrives, then each group's α-β fits; the console
    reporter shows both in the format asked for."""

    def __init__(self, writer: ResultWriter, reporter: Reporter) -> None:
        self.writer = writer
        self.reporter = reporter

    def note(self, text: str) -> None:
        self.reporter.note(text)

    def row(self, row: Row) -> None:
        self.writer.add(row)
        self.reporter.row(row)
        self.reporter.advance()

    def group_done(self, rows: list[Row]) -> None:
        fits = fit_rows(rows)
        if fits:
            self.writer.add_fits([fit.to_dict() for fit in fits])
        self.reporter.group_done(rows, fits)

    def plan(self, steps: int) -> None:
        self.reporter.plan(steps)

    def working(self, text: str) -> None:
        self.reporter.working(text)


def result_paths(config: RunConfig, run_id: str) -> tuple[Path, Path]:
    run_dir = Path(config.output_dir) / run_id
    csv_path = Path(config.csv_path) if config.csv_path else run_dir / "results.csv"
    json_path = Path(config.json_path) if config.json_path else run_dir / "results.json"
    return csv_path, json_path


class StopRequests:
    """SIGINT/SIGTERM on a rank: the first asks the work to stop at its next boundary (the sweep: the
    next size, where every rank agrees, so none is left waiting in a collective); a second stops this
    rank at once. Work that never asks (a pattern), or a signal before the work first asks, stops at
    once too."""

    def __init__(self) -> None:
        self.signum = 0
        self.polled = False

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.signum or not self.polled:
            raise Terminated(signum)
        self.signum = signum

    def requested(self) -> int:
        self.polled = True
        return self.signum


def apply_test_faults(config: RunConfig, info: RankInfo, environ: Mapping[str, str]) -> RunConfig:
    """COMMBENCH_TEST_SKIP=RANK:SIZE (tests only): that rank's sweep leaves SIZE out."""
    spec = environ.get(TEST_SKIP_ENV)
    if not spec or not hasattr(config, "sizes"):
        return config
    rank_text, _, size_text = spec.partition(":")
    if int(rank_text) != info.rank:
        return config
    skipped = parse_size(size_text)
    return replace(config, sizes=[size for size in config.sizes if size != skipped])


def run_rank(configs: list[Any], info: RankInfo, environ: Mapping[str, str],
             work: Work = run_benchmarks) -> int:
    for benchmark in configs:
        check_world(benchmark, info.world_size)
    configs = [apply_test_faults(benchmark, info, environ) for benchmark in configs]
    config = configs[0]  # the run-wide settings
    stops = StopRequests()
    stops.install()
    # NCCL reads its debug variables once, when the backend starts it: they are set before.
    provenance = RunProvenance(ProvenanceOptions.of(config), config.output_dir, os.environ)
    backend = start_backend(config, info, environ)
    writer: ResultWriter | None = None
    output: Output = NullOutput()
    reporter: Reporter | None = None
    try:
        hostnames = backend.all_gather_object(environ.get(HOSTNAME_ENV) or socket.gethostname())
        plan = split_into_groups(config, hostnames)
        membership = join_groups(backend, plan)
        hardware = provenance.gather_hardware(backend, hostnames)
        if info.rank == 0:
            meta = build_meta(configs, info, backend, hostnames, environ, plan)
            meta.hardware = hardware
            reporter = make_reporter(getattr(config, "output_format", "table"), config.quiet,
                                     per_rank=getattr(config, "per_rank", False),  # not on patterns
                                     skew_threshold=getattr(config, "skew_threshold_percent", 25.0))
            reporter.header(meta)
            reporter.note(hardware_summary(hardware))
            csv_path, json_path = result_paths(config, meta.run_id)
            writer = ResultWriter(meta, csv_path, json_path)
            output = RecordingOutput(writer, reporter)
        context = provenance.start_rows(backend, hostnames, [list(ranks) for ranks in plan.members],
                                        writer.meta if writer else None,
                                        writer.json_path.parent if writer else None)
        rows = work(configs, backend, output, Session(membership, stops.requested, context))
        backend.barrier()
    except BaseException as exc:
        if reporter is not None:
            reporter.close()
        raise _finish_failed(exc, info, backend, writer, config) from exc
    # Rows that failed or held wrong values were all measured and kept; the run then exits 1.
    failure = sweep_failure(rows) if isinstance(rows, list) else None
    below = provenance.finish(rows, writer.meta if writer else None, reporter.note if reporter else None) \
        if isinstance(rows, list) else None
    failure = "; ".join(text for text in (failure, below) if text) or None
    if writer is not None and reporter is not None:
        reporter.close()
        writer.finish("failed" if failure else "complete", _now(), failure)
        reporter.files([shlex.quote(str(writer.csv_path)), shlex.quote(str(writer.json_path))])
    backend.shutdown()
    if failure is not None:
        if info.rank == 0:
            raise RunError(failure)
        return 1
    return 0


def _finish_failed(exc: BaseException, info: RankInfo, backend: Backend, writer: ResultWriter | None,
                   config: RunConfig) -> BaseException:
    """Record how the run ended (rank 0's files) and return what to raise for the exit status."""
    if isinstance(exc, Terminated | KeyboardInterrupt):
        signum = exc.exit_code - 128 if isinstance(exc, Terminated) else signal.SIGINT
        if writer is not None:
            writer.finish("interrupted", _now(), f"stopped by {signal.Signals(signum).name}")
        return exc
    if isinstance(exc, UsageError):
        if writer is not None:
            writer.finish("failed", _now(), str(exc))
        # Every rank stops here, so the group can be released cleanly: a process that exits with
        # gloo's threads still running aborts ("terminate called without an active exception").
        backend.shutdown()
        # Every rank finds the same problem with the same input: one message, from rank 0.
        return exc if info.rank == 0 else AlreadyReported(exc.exit_code)
    if isinstance(exc, RunError):
        error = _with_peer_accounts(exc, backend, config)
        if writer is not None:
            writer.finish("failed", _now(), error)
        return RunError(error)
    if writer is not None:
        writer.finish("failed", _now(), f"{type(exc).__name__}: {exc}")
    return exc


def _with_peer_accounts(exc: RunError, backend: Backend, config: RunConfig) -> str:
    """The error, with what the other ranks said (or did not say) about themselves.

    Telling the others also keeps rank 0, whose process may host the store, alive until they have
    read what they need from it.
    """
    error = str(exc)
    accounts = backend.account_for_failure(error, min(FAILURE_GRACE_S, config.timeout_s))
    if isinstance(exc, CheckInFailed):  # its message already says where every missing rank is
        return error
    return f"{error}; {accounts}" if accounts and accounts not in error else error
