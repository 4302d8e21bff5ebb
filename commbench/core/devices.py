"""Which device a rank uses, its local rank, and how much memory it may fill: pure functions over an
environment mapping, host names and device counts, so every rule is tested without a GPU.

Invariants:
- The local rank comes from the first launcher variable set in ``LOCAL_RANK_VARIABLES`` (Slurm's and
  Flux's only inside a task they started); with none set it is the rank's place among the ranks that
  share its host, in rank order. It is never guessed as 0.
- One visible CUDA device means ``cuda:0`` whatever the local rank (a launcher that gives each rank its
  own ``CUDA_VISIBLE_DEVICES``); with several, the local rank indexes them. Two ranks of one host on the
  same physical device is a usage error, found before any communicator exists.
- Only running/ (launcher.py, launch.py, rank.py) calls these with the real environment; nothing here
  reads it.
"""

import ast
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from commbench.core.groups import format_ranks
from commbench.core.sizes import format_size
from commbench.errors import UsageError

# (variable, launcher) in order of precedence: the first one set is the local rank.
LOCAL_RANK_VARIABLES = (
    ("LOCAL_RANK", "torchrun"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"),
    ("MPI_LOCALRANKID", "MPICH, Intel MPI"),
    ("PMI_LOCAL_RANK", "Cray PMI"),
    ("PMIX_LOCAL_RANK", "PMIx"),
    ("MV2_COMM_WORLD_LOCAL_RANK", "MVAPICH"),
    ("SLURM_LOCALID", "Slurm srun"),
    ("FLUX_TASK_LOCAL_ID", "Flux"),
)
# A Slurm batch script (step "batch") and a Flux job shell outside a task are not ranks: their
# SLURM_LOCALID / FLUX_TASK_LOCAL_ID describe the script, not the process a launcher started.
SLURM_BATCH_STEPS = {"batch", "4294967294"}
MEMORY_SHARE = 0.9  # of what the system reports free: the rest stays for the communicator and torch


def _in_task(variable: str, env: Mapping[str, str]) -> bool:
    if variable == "SLURM_LOCALID":
        step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
        return step is not None and step not in SLURM_BATCH_STEPS
    if variable == "FLUX_TASK_LOCAL_ID":
        return "FLUX_TASK_RANK" in env
    return True


def local_rank_from(env: Mapping[str, str]) -> int | None:
    """The local rank a launcher gave this process, or None when none did."""
    for variable, _ in LOCAL_RANK_VARIABLES:
        value = env.get(variable)
        if value is None or not _in_task(variable, env):
            continue
        try:
            local_rank = int(value)
        except ValueError:
            raise UsageError(f"environment variable {variable}={value!r} is not an integer") from None
        if local_rank < 0:
            raise UsageError(f"environment variable {variable}={local_rank} is negative")
        return local_rank
    return None


def local_rank_among(on_host: list[int], rank: int) -> int:
    """The local rank no launcher gave: this rank's place among the ranks on its host (``on_host``, the
    ranks that reported the same host name), in rank order."""
    return sorted(on_host).index(rank)


def visible_devices(env: Mapping[str, str]) -> list[str] | None:
    """The entries of CUDA_VISIBLE_DEVICES (indices, GPU-/MIG- UUIDs), or None when it is not set."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def device_index(local_rank: int, device_count: int, rank: int) -> int:
    """The CUDA device index a rank uses: 0 when it sees one device, else its local rank."""
    if device_count < 1:
        raise UsageError(f"rank {rank}: no CUDA device is visible (CUDA_VISIBLE_DEVICES hides them all?)")
    if device_count == 1:
        return 0
    if local_rank >= device_count:
        raise UsageError(f"rank {rank} has local rank {local_rank} but sees {device_count} CUDA devices: "
                         "start at most one rank per device, or give each rank one device "
                         "(CUDA_VISIBLE_DEVICES)")
    return local_rank


def physical_device(env: Mapping[str, str], index: int, uuid: str | None = None) -> str:
    """What names the device behind index ``index`` on this host: its UUID when torch knows it, else
    its CUDA_VISIBLE_DEVICES entry, else the index itself."""
    if uuid:
        return uuid
    visible = visible_devices(env)
    if visible is not None and index < len(visible):
        return visible[index]
    return str(index)


def duplicate_devices(host: str, device: str, ranks: list[int]) -> str | None:
    """A message naming the ranks of one host that claimed the same device, or None when only one did."""
    if len(ranks) < 2:
        return None
    return (f"{format_ranks(ranks)} on {host} would share CUDA device {device}: NCCL needs one device per "
            "rank; check each rank's local rank (LOCAL_RANK, SLURM_LOCALID, ...) or CUDA_VISIBLE_DEVICES")


def accepted_options(function: Callable, options: Mapping[str, object]) -> dict[str, object]:
    """The options ``function`` accepts by name: torch adds keywords over releases (init_process_group's
    device_id came in 2.3), and commbench supports torch from 2.1."""
    parameters = inspect.signature(function).parameters
    return {name: value for name, value in options.items() if name in parameters}


def mem_available(meminfo: str) -> int | None:
    """MemAvailable from the text of /proc/meminfo, in bytes (None when the kernel does not say)."""
    for line in meminfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "MemAvailable":
            number, _, unit = value.strip().partition(" ")
            return int(number) * (1024 if unit.strip().lower() == "kb" else 1)
    return None


@dataclass(frozen=True)
class MemoryBudget:
    """The bytes of buffers and torch temporaries one rank may hold at once, and where that number came
    from, for the line that refuses a size."""

    limit: int
    source: str  # "--max-memory 8 GiB", "20.1 GiB available (MemAvailable) shared by 2 ranks", ...
    explicit: bool = False  # set by --max-memory

    def describe(self) -> str:
        if self.explicit:
            return self.source
        return f"{approximate_bytes(self.limit)} per rank, {self.source}"


def cpu_budget(available: int | None, ranks_on_host: int) -> MemoryBudget | None:
    """The default budget of a CPU rank: its share of the host's available memory."""
    if available is None:
        return None
    share = int(available * MEMORY_SHARE) // max(1, ranks_on_host)
    shared = f" shared by {ranks_on_host} ranks" if ranks_on_host > 1 else ""
    return MemoryBudget(share, f"{MEMORY_SHARE:.0%} of the {approximate_bytes(available)} available "
                               f"(MemAvailable){shared}")


def cuda_budget(free: int) -> MemoryBudget:
    """The default budget of a CUDA rank: most of its device's free memory (torch.cuda.mem_get_info)."""
    return MemoryBudget(int(free * MEMORY_SHARE), f"{MEMORY_SHARE:.0%} of the device's "
                                                  f"{approximate_bytes(free)} free (cudaMemGetInfo)")


def explicit_budget(max_memory: int) -> MemoryBudget:
    return MemoryBudget(max_memory, f"--max-memory {format_size(max_memory)}", explicit=True)


def approximate_bytes(num_bytes: int) -> str:
    """Bytes to three significant figures in the largest fitting power-of-1024 unit: '19.9 GiB'."""
    for unit, scale in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2),
                        ("KiB", 1024)):
        if num_bytes >= scale:
            value = num_bytes / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"  # not 1e+03
    return f"{num_bytes} B"


def torch_build() -> dict[str, object] | None:
    """The installed torch's ``cuda`` and ``hip`` versions (None: built without it), read from its
    ``version.py`` without importing torch, which takes seconds; None whenever that cannot be told for
    certain (no such file, a form it does not expect): the caller then asks torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    found: dict[str, object] = {}
    for location in spec.submodule_search_locations:
        try:
            tree = ast.parse(Path(location, "version.py").read_text())
        except (OSError, SyntaxError, ValueError):
            return None
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id in ("cuda", "hip") and node.value is not None:
                found[target.id] = node.value.value if isinstance(node.value, ast.Constant) else node.value
    return found if {"cuda", "hip"} <= set(found) else None


# Where the NVIDIA driver shows itself: a machine with none of these has no GPU CUDA can use (WSL's
# GPU is /dev/dxg).
NVIDIA_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def cuda_ruled_out(environ: Mapping[str, str], build: dict[str, object] | None,
                   exists: Callable[[str], bool]) -> str | None:
    """Why torch.cuda.is_available() is certainly False here, told without importing torch (a CUDA
    build imports in seconds, and a launcher that only spawns ranks never needs it); None when it may be
    True, and torch must be asked. ``build`` is torch_build()'s answer; ``exists`` tells whether a path
    exists. A ROCm build is always asked."""
    if build is None or build["hip"] is not None:
        return None
    if build["cuda"] is None:
        return "torch is a CPU-only build"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.split(",")[0].strip() == "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"  # what the CUDA runtime then counts
    if not any(exists(path) for path in NVIDIA_DRIVER_PATHS):
        return "no NVIDIA driver on this machine"
    return None
