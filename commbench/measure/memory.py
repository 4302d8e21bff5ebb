"""A rank's memory, as nccl-tests' -M splits it: what starting the process group took, what a size's
buffers take (user memory), and what the collective took beside them (torch's temporaries and the
communication library's own memory).

- Host: the process's resident set (RSS, /proc/self/statm) and its peak (VmHWM in /proc/self/status),
  which writing 5 to /proc/self/clear_refs resets to the current RSS (Linux 4.0 and later). Where the
  reset is refused, the peak is the RSS at the end.
- CUDA: the device's used memory (total - free, cudaMemGetInfo: every allocation on the device, the
  communication library's included, which torch's allocator does not see), and torch's allocator (its
  reserved and allocated bytes, and the peak of allocated since the size began). What the device gained
  beyond what torch's allocator reserved is memory outside it: NCCL's buffers, channels and
  communicators made on first use.

At the start (``StartMemory``) every rank reads its memory before its process group starts and after;
results.json keeps both per rank (meta.memory.start).

A size's account (``SizeMemory``): before its buffers are allocated the peaks are reset and the memory
read; after its last op it is read again. Then, on one rank:

    user      = the bytes of the buffers (every set), the flush buffer and the matmul's matrices
    internal  = host: peak RSS - RSS before - user (what the ops made beside the buffers); on CUDA:
                torch's peak allocated - allocated before - user, plus library
    library   = CUDA only: (device used after - before) - (torch reserved after - before)

each at least 0. The CUDA reads run only on a CUDA device, so a CPU run (and the CPU test suite) never
reaches them.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PROC_SELF = Path("/proc/self")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def host_rss(proc: Path = PROC_SELF) -> int | None:
    """This process's resident bytes; None where /proc says nothing (not Linux)."""
    try:
        return int((proc / "statm").read_text().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


def host_peak(proc: Path = PROC_SELF) -> int | None:
    """The peak resident bytes since the process started or the last ``reset_host_peak``."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+)\s+kB", (proc / "status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def reset_host_peak(proc: Path = PROC_SELF) -> bool:
    """Reset the peak to the current RSS; False where the kernel refuses."""
    try:
        (proc / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class DeviceMemory:
    """A CUDA device's memory as the driver and torch's allocator see it, in bytes."""

    used: int  # total - free: every allocation on the device
    reserved: int  # torch's allocator: held from the device
    allocated: int  # torch's allocator: handed to tensors
    peak_allocated: int  # since the last reset (reset_device_peak)


def device_memory(device: "torch.device") -> DeviceMemory | None:
    """The device's memory (CUDA); None on any other device."""
    if device.type != "cuda":
        return None
    import torch

    free, total = torch.cuda.mem_get_info(device)
    cuda = torch.cuda
    return DeviceMemory(int(total - free), int(cuda.memory_reserved(device)),
                        int(cuda.memory_allocated(device)), int(cuda.max_memory_allocated(device)))


def reset_device_peak(device: "torch.device") -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)


@dataclass(frozen=True)
class Snapshot:
    """One rank's memory at one moment."""

    rss: int | None
    device: DeviceMemory | None

    @classmethod
    def now(cls, device: "torch.device") -> "Snapshot":
        return cls(host_rss(), device_memory(device))

    def as_dict(self) -> dict[str, int | None]:
        device = self.device
        return {"host_rss_bytes": self.rss, "device_used_bytes": None if device is None else device.used,
                "torch_reserved_bytes": None if device is None else device.reserved}


@dataclass
class StartMemory:
    """One rank's memory just before its process group starts (its device chosen) and just after (on
    NCCL the communicator is made at the start: commbench binds the group to its device)."""

    before: Snapshot | None = None
    after: Snapshot | None = None

    def as_dict(self) -> dict[str, int | None]:
        """What results.json's meta.memory.start holds per rank."""
        empty = Snapshot(None, None)
        before, after = (self.before or empty).as_dict(), (self.after or empty).as_dict()
        return {**{f"{key.removesuffix('_bytes')}_before_bytes": value for key, value in before.items()},
                **{f"{key.removesuffix('_bytes')}_after_bytes": value for key, value in after.items()}}


def growth(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else max(0, after - before)


@dataclass(frozen=True)
class SizeAccount:
    """One rank's account of one size (the module docstring), in bytes; None where not measurable."""

    user: int
    internal: int | None
    library: int | None

    def floats(self) -> list[float]:
        """For an exchange between ranks (NaN: not measured)."""
        return [float(value) if value is not None else float("nan")
                for value in (self.user, self.internal, self.library)]


class SizeMemory:
    """One size's memory on this rank: ``start`` before its buffers exist, ``finish`` after its last op."""

    def __init__(self, device: "torch.device") -> None:
        self.device = device
        self.peak_reset = reset_host_peak()
        reset_device_peak(device)
        self.before = Snapshot.now(device)

    def finish(self, user: int) -> SizeAccount:
        after = Snapshot.now(self.device)
        before_device, after_device = self.before.device, after.device
        if before_device is not None and after_device is not None:
            library = max(0, (after_device.used - before_device.used) -
                          (after_device.reserved - before_device.reserved))
            temporaries = max(0, after_device.peak_allocated - before_device.allocated - user)
            return SizeAccount(user, temporaries + library, library)
        peak = host_peak() if self.peak_reset else after.rss
        taken = growth(self.before.rss, peak)
        return SizeAccount(user, None if taken is None else max(0, taken - user), None)
