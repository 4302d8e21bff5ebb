"""Launch: who am I (torchrun, mpirun, srun, or nobody), spawning local ranks when nobody launched us,
and setting up the device, the backend and the process group once for the rest of the run.

This is the one module that reads environment variables.
"""

import ctypes
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

from commbench import __version__
from commbench.backends.base import Backend
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config import RunConfig
from commbench.errors import RunError, Terminated, UsageError
from commbench.fit import fit_rows
from commbench.formats import Reporter, make_reporter
from commbench.results import ResultWriter, Row, RunMeta
from commbench.runner import NullOutput, Output, run_benchmarks

LAUNCHER_ENV = "COMMBENCH_LAUNCHER"  # set by our own spawner on the ranks it starts
RECORDED_ENV_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "UCC_", "UCX_", "CUDA_VISIBLE_DEVICES",
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


def spawn_local(argv: list[str], nproc: int, grace_s: float = 10.0) -> int:
    """Run ``python -m commbench ARGV`` as ``nproc`` local ranks; their exit status is ours.

    When one rank fails the others get ``grace_s`` to notice and exit on their own, then are stopped.
    SIGINT and SIGTERM are forwarded; ranks run in their own process group so a terminal's Ctrl-C
    reaches them once, through us.
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
        return _wait_for_ranks(procs, grace_s, received)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _wait_for_ranks(procs: list[subprocess.Popen], grace_s: float, received: list[int]) -> int:
    first_failure: tuple[int, int] | None = None
    deadline: float | None = None
    stopping = False
    while True:
        codes = [proc.poll() for proc in procs]
        if first_failure is None:
            for rank, code in enumerate(codes):
                if code not in (None, 0):
                    first_failure = (rank, code)
                    deadline = time.monotonic() + grace_s
                    break
        if all(code is not None for code in codes):
            break
        if received and deadline is None:
            deadline = time.monotonic() + grace_s
        if deadline is not None and time.monotonic() > deadline:
            for proc in procs:
                if proc.poll() is None:
                    (proc.kill if stopping else proc.terminate)()
            stopping, deadline = True, time.monotonic() + 5.0
        time.sleep(0.05)
    if received:
        return 128 + received[0]
    if first_failure is None:
        return 0
    rank, code = first_failure
    if code < 0:
        name = signal.Signals(-code).name
        print(f"commbench: error: rank {rank} died ({name}); the other ranks were stopped",
              file=sys.stderr)
        return 1
    return code


def check_local_launch(configs: list[RunConfig]) -> None:
    """What the spawner can check before starting ranks."""
    config = configs[0]
    for benchmark in configs:
        if benchmark.root >= config.nproc:
            raise UsageError(f"--root {benchmark.root} is outside the world of {config.nproc} ranks")
    if config.device == "cuda" and config.nproc > torch.cuda.device_count():
        raise UsageError(f"--nproc {config.nproc} needs {config.nproc} CUDA devices (one per rank); "
                         f"this machine has {torch.cuda.device_count()}")


# --- one rank's run -----------------------------------------------------------------------------

def launch(configs: list[RunConfig], environ: Mapping[str, str] | None = None) -> int:
    """Run the benchmarks (one, or a sweep file's) in one process group: as one rank of a launched job,
    or by spawning local ranks that re-run the same command line. The run-wide settings (backend,
    device, files, ...) are the same in every config; the first one's are used."""
    environ = os.environ if environ is None else environ
    config = configs[0]
    info = detect(environ, config.backend)
    if info is None:
        check_local_launch(configs)
        return spawn_local(config.argv, config.nproc)
    return run_rank(configs, info, environ)


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
    backend = start_backend(config, info)
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


def start_backend(config: RunConfig, info: RankInfo) -> Backend:
    device = select_device(config, info)
    try:
        return TorchDistBackend.create(config.backend, device, info.rank, info.world_size,
                                       info.master_addr or "", info.master_port or 0, config.timeout_s)
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(f"rank {info.rank}: the {config.backend} process group did not start "
                       f"(MASTER_ADDR={info.master_addr}, MASTER_PORT={info.master_port}, "
                       f"timeout {config.timeout_s:g} s): {detail}") from exc


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def make_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def _config_record(config: RunConfig) -> dict:
    return {key: value for key, value in asdict(config).items() if key != "argv"}


def build_meta(configs: list[RunConfig], info: RankInfo, backend: Backend, hostnames: list[str],
               environ: Mapping[str, str]) -> RunMeta:
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

    def group_done(self, rows: list[Row]) -> None:
        fits = fit_rows(rows)
        if fits:
            self.writer.add_fits([fit.to_dict() for fit in fits])
        self.reporter.group_done(rows, fits)


def result_paths(config: RunConfig, run_id: str) -> tuple[Path, Path]:
    run_dir = Path(config.output_dir) / run_id
    csv_path = Path(config.csv_path) if config.csv_path else run_dir / "results.csv"
    json_path = Path(config.json_path) if config.json_path else run_dir / "results.json"
    return csv_path, json_path


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def run_rank(configs: list[RunConfig], info: RankInfo, environ: Mapping[str, str]) -> int:
    signal.signal(signal.SIGTERM, _raise_terminated)
    config = configs[0]  # the run-wide settings
    backend = start_backend(config, info)
    writer: ResultWriter | None = None
    output: Output = NullOutput()
    reporter: Reporter | None = None
    try:
        hostnames = backend.all_gather_object(socket.gethostname())
        if info.rank == 0:
            meta = build_meta(configs, info, backend, hostnames, environ)
            reporter = make_reporter(config.output_format, config.quiet)
            reporter.header(meta)
            csv_path, json_path = result_paths(config, meta.run_id)
            writer = ResultWriter(meta, csv_path, json_path)
            output = RecordingOutput(writer, reporter)
        run_benchmarks(configs, backend, output)
        backend.barrier()
    except BaseException as exc:
        if writer is not None:
            interrupted = isinstance(exc, KeyboardInterrupt | Terminated)
            writer.finish("interrupted" if interrupted else "failed", _now(),
                          None if interrupted else str(exc))
        raise
    if writer is not None and reporter is not None:
        writer.finish("complete", _now())
        reporter.files([shlex.quote(str(writer.csv_path)), shlex.quote(str(writer.json_path))])
    backend.shutdown()
    return 0
