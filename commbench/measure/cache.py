"""Buffers that run cold or misaligned: --misalign, --buffers and --flush-cache.

- ``misaligned`` wraps a Layout's allocator: every buffer is a view that starts ``offset`` bytes into a
  block one element-run longer, so its address is that many bytes past the allocator's alignment (torch
  aligns to 64 bytes on CPU, 512 on CUDA). Views of it (an in-place chunk) are as misaligned.
- ``Rotation`` issues each op on the next of N sets of buffers, round robin: between two uses of a set
  N - 1 other ops ran, each on buffers of its own, so with N x the buffers larger than a cache no op
  finds its data there (rccl-tests' -R). Setting the two buffer fields of the call is all it adds to an
  op's time (a few hundred nanoseconds on the host).
- ``CacheFlush`` writes a buffer the size of the cache before each timed op (each async window), outside
  its time (timing.BoundOp.prepare): the last-level cache on a CPU (read from sysfs), the L2 on a GPU
  (the device's properties); on CUDA the write is queued before the op's start event. A barrier follows
  it (``then_meet``), so that no rank's op waits inside the collective for a slower rank's write. It
  flushes what the op's own buffers left in the cache, at the price of the write and a barrier between
  ops.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from commbench.backends.base import Backend, CollectiveArgs
    from commbench.measure.collectives.base import Buffers

Allocate = Callable[[int, "torch.dtype", "torch.device"], "torch.Tensor"]
Issue = Callable[["Backend", "CollectiveArgs"], None]
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
FALLBACK_CACHE_BYTES = 64 << 20  # a cache whose size the system does not say: above most LLCs


def misaligned(allocate: Allocate | None, offset_bytes: int) -> Allocate | None:
    """An allocator whose tensors start ``offset_bytes`` past the alignment of ``allocate``'s (None:
    torch.empty); ``allocate`` itself when the offset is 0. The offset is whole elements of the dtype
    (checked when the run is configured)."""
    if not offset_bytes:
        return allocate

    def allocate_misaligned(count: int, dtype: "torch.dtype", device: "torch.device") -> "torch.Tensor":
        import torch

        skip = offset_bytes // dtype.itemsize
        block = allocate(count + skip, dtype, device) if allocate is not None else \
            torch.empty(count + skip, dtype=dtype, device=device)
        return block[skip:]

    return allocate_misaligned


@dataclass
class Rotation:
    """Issue each op on the next set of buffers (their input and output; the other fields of a call are
    the same in every set)."""

    sets: list["Buffers"]
    issue: Issue
    next_set: int = 0

    def __call__(self, backend: "Backend", args: "CollectiveArgs") -> None:
        buffers = self.sets[self.next_set]
        args.input, args.output = buffers.input, buffers.output
        self.next_set = (self.next_set + 1) % len(self.sets)
        self.issue(backend, args)

    def pinned(self, index: int = 0) -> Issue:
        """An issue that always uses set ``index`` (--check fills and reads that set)."""
        def issue(backend: "Backend", args: "CollectiveArgs") -> None:
            buffers = self.sets[index]
            args.input, args.output = buffers.input, buffers.output
            self.issue(backend, args)
        return issue


def cpu_cache_bytes(caches: Path = CPU_CACHES) -> int | None:
    """The largest data or unified cache of CPU 0 (its last level), in bytes, from sysfs; None when the
    system does not say."""
    sizes = []
    try:
        for index in sorted(caches.glob("index*")):
            if (index / "type").read_text().strip() in ("Data", "Unified"):
                sizes.append(parse_cache_size((index / "size").read_text()))
    except (OSError, ValueError):
        return None
    return max(sizes) if sizes else None


def parse_cache_size(text: str) -> int:
    """sysfs's '32768K', '1024K', '2M' (or plain bytes) as bytes; ValueError otherwise."""
    text = text.strip()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def cache_bytes(device: "torch.device") -> tuple[int, str]:
    """The size of the cache --flush-cache writes over, and where it came from."""
    if device.type == "cuda":
        import torch

        size = int(torch.cuda.get_device_properties(device).L2_cache_size)
        if size > 0:
            return size, "the GPU's L2"
    else:
        found = cpu_cache_bytes()
        if found:
            return found, "the last-level cache, from sysfs"
    return FALLBACK_CACHE_BYTES, "a default: the system does not say"


def then_meet(flush: "CacheFlush | None", backend: "Backend") -> Callable[[], None] | None:
    """The flush, then a barrier: every rank starts its op together, none waiting inside it for a
    slower rank's flush (None without a flush)."""
    if flush is None:
        return None

    def flush_and_meet() -> None:
        flush()
        backend.barrier()

    return flush_and_meet


@dataclass
class CacheFlush:
    """A cache-sized buffer written before each timed op: ``__call__`` queues the write (on CUDA on the
    current stream, ahead of the op's start event; on CPU it is done when the call returns)."""

    buffer: Any  # a uint8 tensor of the cache's size, allocated before any timed region
    source: str = ""
    _value: int = field(default=0, repr=False)

    @classmethod
    def for_device(cls, device: "torch.device") -> "CacheFlush":
        import torch

        size, source = cache_bytes(device)
        return cls(torch.empty(size, dtype=torch.uint8, device=device), source)

    @property
    def nbytes(self) -> int:
        return int(self.buffer.numel())

    def __call__(self) -> None:
        self._value = 1 + self._value % 250  # a new value each time: every line is written, none skipped
        self.buffer.fill_(self._value)
