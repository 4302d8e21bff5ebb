"""One rank's start-up and run, once a launcher (or spawn.py) has started it: meet the others, agree
on where each runs, start the backend, split the sub-communicators, agree on a memory budget, record,
run the work, and decide how the run ends.

Where a rank runs and how much memory it may fill are agreed with the other ranks before anything is
measured: its CUDA device through the rendezvous store, before NCCL starts; its memory budget through
the control group. The rules are core/devices.py's pure functions of the environment mapping that
launch passes in.

launch.py imports this module only on a rank: it imports torch, which the spawning launcher does not
need (its start-up stays well under a second).
"""

import os
import signal
import socket
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.backends.base import Backend
from commbench.backends.paths import torchcomms_place
from commbench.config.launch import Benchmark, LaunchConfig
from commbench.coordination import BOARD_ENV, CheckInFailed, LauncherBoard
from commbench.core import devices
from commbench.core.devices import MemoryBudget
from commbench.core.groups import GroupPlan, split_by_hosts, split_world, world_plan
from commbench.errors import AlreadyReported, RunError, Terminated, UsageError, brief, failures_named
from commbench.measure.memory import Snapshot, StartMemory
from commbench.provenance.describe import hardware_summary
from commbench.results.model import Row
from commbench.running.launcher import RankInfo
from commbench.running.provenance import RunProvenance
from commbench.running.rank_sets import RankSets, join_groups
from commbench.running.recording import Recording, build_meta, make_run_id, run_directory
from commbench.running.runner import Session, not_measured, sweep_failure
from commbench.writers.console import output_closed
from commbench.writers.output import NullOutput, Output

if TYPE_CHECKING:
    from commbench.coordination import Rendezvous, StartUp

# What a rank runs once its backend is up: a sweep's benchmarks, or a workload pattern
# (commbench.patterns); the first benchmark's launch settings are the run's.
Work = Callable[[list[Any], Backend, Output, Session], Sequence[Row]]
FAILURE_GRACE_S = 2.0  # how long a failed rank waits to hear what became of the others
# Where a failed run's ranks leave their Flight Recorder dumps, in the run directory (docs/diagnose.md)
FLIGHT_RECORDER_DIR, FLIGHT_RECORDER_PREFIX = "flight-recorder", "rank_"


def rendezvous_of(info: RankInfo, environ: Mapping[str, str]) -> "Rendezvous":
    from commbench.coordination import Rendezvous

    # Under torchrun the agent hosts the store at MASTER_PORT, and a restart reuses it.
    return Rendezvous(info.rank, info.world_size, info.master_addr or "", info.master_port or 0,
                      launcher_hosts_store=environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
                      attempt=environ.get("TORCHELASTIC_RESTART_COUNT", "0"),
                      launcher_board=environ.get(BOARD_ENV, "") if info.launcher == "local" else "")


def start_backend(setup: LaunchConfig, info: RankInfo, environ: Mapping[str, str],
                  memory: StartMemory | None = None) -> Backend:
    """Meet the other ranks at the store, agree on devices, then start the process group (``memory``:
    read just before and just after it starts)."""
    from commbench.backends.torch_dist import TorchDistBackend
    from commbench.coordination import StartUp

    name = setup.backend or "gloo"
    startup = StartUp(name, rendezvous_of(info, environ), setup.timeout_s)
    try:
        startup.meet()
        device = place(setup, (info.rank, info.local_rank), environ, startup)
        memory = memory or StartMemory()
        memory.before = Snapshot.now(device)
        started = startup.start(device)
        memory.after = Snapshot.now(device)
        return TorchDistBackend(name, device, started)
    except (RunError, UsageError, AlreadyReported):
        raise
    except Exception as exc:
        detail = brief(exc)
        # torch's words when the group's own timeout (--timeout) ran out: 'wait timeout after 1ms',
        # gloo's 'Connect timeout', 'Timed out waiting ...': said as the timeout, as the check-ins say it
        timed_out = "timeout" in detail.lower() or "timed out" in detail.lower()
        within = f" within {setup.timeout_s:g} s (--timeout)" if timed_out else ""
        error = (f"rank {info.rank}: the {name} process group did not start{within} (MASTER_ADDR="
                 f"{info.master_addr}, MASTER_PORT={info.master_port}, timeout {setup.timeout_s:g} s): "
                 f"{detail}")
        startup.give_up(error, min(FAILURE_GRACE_S, setup.timeout_s))
        raise RunError(error) from exc


HOSTNAME_ENV = "COMMBENCH_HOSTNAME"  # the host name a rank reports, when the system's says too little


def host_name(environ: Mapping[str, str]) -> str:
    return environ.get(HOSTNAME_ENV) or socket.gethostname()


def place(setup: LaunchConfig, ranks: tuple[int, int | None], environ: Mapping[str, str],
          startup: "StartUp") -> Any:
    """This rank's device (``ranks``: its rank and the local rank a launcher gave, or None). On CUDA
    every rank first learns which ranks share its host (its local rank when no launcher gave one), then
    claims its physical device; a problem on any rank (too few devices, two ranks on one device) stops
    every rank before a communicator exists, with one message."""
    import torch

    if setup.device != "cuda":
        return torch.device("cpu")
    rank, local_rank = ranks
    host = host_name(environ)
    on_host = startup.peers("hosts", host)
    device, problem = None, None
    try:
        if local_rank is None:
            if on_host is None:
                raise UsageError(f"rank {rank}: no launcher variable gives its local rank (set "
                                 "LOCAL_RANK), and without a rendezvous store it cannot be derived")
            local_rank = devices.local_rank_among(on_host, rank)
        index = devices.device_index(local_rank, torch.cuda.device_count(), rank)
        device = torch.device("cuda", index)
        claim = devices.physical_device(environ, index, device_uuid(index))
    except UsageError as exc:
        problem, claim = str(exc), f"unplaced rank {rank}"
    sharing = startup.peers("devices", f"{host}|{claim}") or [rank]
    problem = problem or devices.duplicate_devices(host, claim, sharing)
    agreed = startup.agree("devices", problem)
    if agreed is not None:
        raise UsageError(agreed) if rank == 0 else AlreadyReported(UsageError.exit_code)
    return device


def device_uuid(index: int) -> str | None:
    """The device's UUID, where this torch reports one (the surest name for a physical GPU)."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return str(uuid) if uuid is not None else None


def memory_budget(backend: Backend, hostnames: list[str]) -> MemoryBudget | None:
    """The memory a rank may fill when --max-memory is not given: most of its device's free memory on
    CUDA, its share of the host's available memory on CPU; the smallest over ranks, so that every rank
    refuses the same sizes (None when a rank cannot tell)."""
    free = backend.free_device_memory()
    if free is not None:
        mine: MemoryBudget | None = devices.cuda_budget(free)
    else:
        try:
            available = devices.mem_available(Path("/proc/meminfo").read_text())
        except OSError:  # not Linux
            available = None
        mine = devices.cpu_budget(available, hostnames.count(hostnames[backend.rank]))
    budgets = backend.all_gather_object(mine)
    if any(budget is None for budget in budgets):
        return None
    return min(budgets, key=lambda budget: budget.limit)


def split_into_groups(setup: LaunchConfig, hostnames: list[str]) -> GroupPlan:
    """The run's sub-communicators; presets need every rank's host name, so this runs after the start."""
    if setup.groups is not None:
        return split_by_hosts(hostnames, setup.groups)
    if setup.group_size is not None:
        return split_world(len(hostnames), setup.group_size, setup.group_layout or "contiguous")
    return world_plan(len(hostnames))


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
        """The signal a user sent this rank (0: none). A closed stdout (`commbench ... | head`) asks
        as SIGPIPE would, had Python not set it aside: the ranks stop together, the files whole."""
        self.polled = True
        if not self.signum and output_closed():
            self.signum = signal.SIGPIPE
        return self.signum


def rank_sets(setup: LaunchConfig, info: RankInfo, environ: Mapping[str, str], backend: Backend
              ) -> RankSets | None:
    """What starts rank processes of their own for an implementation set: they meet at this run's store,
    so there is none without one (MPI starting its own ranks)."""
    rendezvous = rendezvous_of(info, environ)
    if not rendezvous.master_addr:
        return None
    return RankSets(rendezvous, setup.backend or "gloo", backend.device, setup.timeout_s)


def run_rank(benchmarks: list[Benchmark], info: RankInfo, environ: Mapping[str, str], work: Work) -> int:
    for benchmark in benchmarks:
        benchmark.check_world(info.world_size)
    setup = benchmarks[0].launch
    stops = StopRequests()
    stops.install()
    # NCCL reads its debug variables once, when the backend starts it: they are set before.
    provenance = RunProvenance(setup, os.environ)
    at_start = StartMemory()
    backend = start_backend(setup, info, environ, at_start)
    torchcomms_place(os.environ, backend.rank, backend.world_size)  # --impl torchcomms, whoever launched us
    recording: Recording | None = None
    dumps: Path | None = None
    try:
        # the start's exchanges wait --timeout as collectives do: one that runs out is named, no traceback
        with failures_named(lambda: f"the run's start (host names, groups) failed on rank {info.rank}"):
            # every rank's host, rank 0's run id (where every rank leaves its Flight Recorder dump on
            # failure) and every rank's memory at start
            met = backend.all_gather_object((host_name(environ), make_run_id(), at_start.as_dict()))
            hostnames = [host for host, _, _ in met]
            run_id = met[0][1]
            dumps = run_directory(setup, run_id) / FLIGHT_RECORDER_DIR
            plan = split_into_groups(setup, hostnames)
            membership = join_groups(backend, plan)
            hardware = provenance.gather_hardware(backend, hostnames)
            if info.rank == 0:
                meta = build_meta(benchmarks, backend, hostnames, environ, plan, info.launcher, run_id)
                meta.hardware = hardware
                meta.memory = {"start": [memory for _, _, memory in met]}
                recording = Recording(meta, setup)
                if info.launcher == "local" and environ.get(BOARD_ENV):
                    # the launcher settles the files should this process die before it can
                    LauncherBoard(environ[BOARD_ENV]).record_results(recording.writer.json_path,
                                                                     recording.writer.csv_path)
                recording.note(hardware_summary(hardware))
            members = [list(ranks) for ranks in plan.members]
            context = provenance.start_rows(backend, hostnames, members, recording)
            session = Session(membership, stops.requested, context, memory_budget(backend, hostnames),
                              hostnames=tuple(hostnames), rank_sets=rank_sets(setup, info, environ, backend))
        rows = work(benchmarks, backend, recording or NullOutput(), session)
        backend.barrier()
        stops.done = True
    except BaseException as exc:
        if recording is not None:
            recording.close_console()
        raise _finish_failed(exc, info, backend, recording, setup, dumps) from exc
    # Rows that failed or held wrong values were all measured and kept; the run then exits 1.
    failure = sweep_failure(rows)
    below = provenance.finish(rows, recording)
    failure = "; ".join(text for text in (failure, not_measured(session.unmeasured), below) if text) or None
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
                   setup: LaunchConfig, dumps: Path | None) -> BaseException:
    """Record how the run ended (rank 0's files) and return what to raise for the exit status."""
    if isinstance(exc, Terminated | KeyboardInterrupt):
        signum = exc.exit_code - 128 if isinstance(exc, Terminated) else signal.SIGINT
        if recording is not None:
            closed = " (stdout was closed)" if signum == signal.SIGPIPE else ""
            recording.interrupted(signal.Signals(signum).name + closed)
        if isinstance(exc, Terminated) and exc.agreed:
            # every rank stopped at the same check-in: release the group as a complete run does (a
            # process that exits with gloo's threads still running may abort: "terminate called
            # without an active exception", exit -6 instead of 143)
            backend.shutdown()
        else:
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
        # dumped before telling the others: once rank 0 has every rank's account, their dumps are there
        path = None if dumps is None else dumps / f"{FLIGHT_RECORDER_PREFIX}{info.rank}"
        saved = path is not None and save_flight_recorder(backend, path)
        error = _with_peer_accounts(exc, backend, setup)
        if saved:
            error = f"{error}; Flight Recorder dumps in {dumps}"  # last: the command line reads it there
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


def save_flight_recorder(backend: Backend, path: Path) -> bool:
    """This rank's Flight Recorder dump written whole to ``path`` (renamed into place); False when the
    backend keeps none or it cannot be written (the failure is reported either way)."""
    data = backend.flight_recorder_dump()
    if not data:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(partial, path)
    except OSError:
        return False
    return True
