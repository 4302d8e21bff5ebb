"""What the implementations of a collective need from this process (Capabilities) and ask the backend
to set up (PathSpec): plain values, probed on the ranks by commbench.backends.capabilities and read by
the implementations' probes in commbench.measure.impls (pure rules, testable without a GPU).

Invariant: a feature is present unless ``missing`` names it, with the reason in words a user can act
on ('torch 2.13.0+cpu has no CUDA kernel for symm_mem::one_shot_all_reduce').
"""

from dataclasses import dataclass, field

# Every feature an implementation may need, with what it is (docs/implementations.md lists them).
FEATURES = {
    "nccl-mem-pool": "torch.cuda.MemPool over NCCL's allocator, registered with the communicator "
                     "(ProcessGroupNCCL.mem_allocator, register_mem_pool)",
    "nccl-window": "torch's symmetric memory on NCCL (symm_mem.set_backend('NCCL')): NCCL windows, "
                   "NCCL >= 2.27",
    "nccl-cta-policy": "ProcessGroupNCCL.Options().config.cta_policy and the NCCL_CTA_POLICY_* values",
    "symm-mem": "torch.distributed._symmetric_memory with its CUDA kernels",
    "multicast": "multicast (NVLink SHARP) on this device, as torch's symmetric memory reports it",
    "nvshmem": "NVSHMEM in this torch build, usable at run time (symm_mem.is_nvshmem_available)",
    "torchcomms": "the torchcomms package",
    "profiler": "torch.profiler with the device's activity",
}


@dataclass(frozen=True)
class Capabilities:
    """What this process offers: its backend and device, the torch and NCCL versions, and each
    feature of FEATURES it lacks with why. ``kernels`` holds the ops whose CUDA kernel this torch has."""

    backend: str
    device: str
    torch_version: str = ""
    nccl_version: tuple[int, ...] | None = None
    missing: dict[str, str] = field(default_factory=dict)
    kernels: frozenset[str] = frozenset()

    def lacks(self, feature: str) -> str | None:
        """Why ``feature`` is missing here; None when it is present."""
        return self.missing.get(feature)

    def kernel_missing(self, op: str) -> str | None:
        """Why torch cannot run ``op`` ('symm_mem::one_shot_all_reduce_out') on CUDA; None if it can."""
        if op in self.kernels:
            return None
        return f"torch {self.torch_version or '?'} has no CUDA kernel for {op}"

    @classmethod
    def none(cls, backend: str, device: str, why: str) -> "Capabilities":
        return cls(backend, device, missing=dict.fromkeys(FEATURES, why))


# The memory kinds whose buffers live in torch's symmetric memory, with the backend each sets
# (symm_mem.set_backend). torch holds one such backend per process, fixed once its allocator is used, so
# implementations whose kinds name different backends run in rank processes of their own.
SYMMETRIC_BACKENDS = {"nccl-window": "NCCL", "symmetric": "CUDA", "multicast": "CUDA", "nvshmem": "NVSHMEM"}


@dataclass(frozen=True)
class PathSpec:
    """What an implementation asks the backend to set up before its ops run: two kinds, each of which
    commbench.backends.paths implements once, as an object (MEMORY_KINDS, COMMUNICATOR_KINDS).

    ``memory``, where a size's buffers live: plain (torch's allocator), nccl-registered (a pool of NCCL's
    allocator registered with the communicator), nccl-window (torch's symmetric memory on NCCL: windows),
    symmetric (torch's own symmetric memory, CUDA backend), multicast (the same, its multicast confirmed
    by torch at set-up) or nvshmem (torch's symmetric memory, NVSHMEM backend). ``communicator``, what
    runs the ops: run (the run's own), cta-efficiency or cta-zero (one of its own made with that NCCL CTA
    policy), or torchcomms (a torchcomms communicator).
    """

    memory: str = "plain"
    communicator: str = "run"

    @property
    def symmetric_backend(self) -> str:
        """The symmetric-memory backend this path fixes for its process ('' none)."""
        return SYMMETRIC_BACKENDS.get(self.memory, "")


def version_text(version: tuple[int, ...] | None) -> str:
    return "unknown" if version is None else ".".join(map(str, version))
