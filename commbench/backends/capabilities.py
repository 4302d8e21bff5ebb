"""Probing what this process's torch, NCCL and device offer the implementations (core/paths.py): by the
API surface that exists and what the driver and the run's communicator say, never by trying an op. Each
missing feature gets its reason.

Runs on every rank at the start of a sweep that asks for an implementation other than c10d. Invariants:
nothing here allocates device memory, starts a communicator or touches torch's symmetric-memory
allocator (asking torch's ``_SymmetricMemory.has_multicast_support`` marks the allocator in use, after
which ``symm_mem.set_backend`` refuses every other backend: docs/implementations.md); a probe that
raises makes its feature missing with the error, never ends the sweep.
"""

import ctypes
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from commbench.core.paths import FEATURES, Capabilities
from commbench.errors import brief

# The torch ops the implementations call, whose CUDA kernels a build may lack (a CPU build has none).
SYMMETRIC_OPS = ("one_shot_all_reduce_out", "two_shot_all_reduce_", "two_shot_all_reduce_out",
                 "multimem_all_reduce_", "multimem_one_shot_all_reduce_out", "multimem_all_gather_out",
                 "reduce_scatter_out", "all_to_all_vdev")
# cuda.h's CUdevice_attribute for "device supports switch multicast and reduction" (CUDA 12.1+)
CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
MULTICAST_CUDA = (12, 3)  # torch compiles its multicast support only from this CUDA runtime on


@dataclass(frozen=True)
class Site:
    """Where the probes run: the rank's device and the run's communicator (what only the communicator
    can say: whether NCCL can allocate tensors here). ``group`` None: the default process group."""

    device: torch.device
    group: Any = None

    @property
    def index(self) -> int:
        return self.device.index if self.device.index is not None else torch.cuda.current_device()


def probe_capabilities(backend: str, device: torch.device, group: Any = None) -> Capabilities:
    """This process's capabilities for ``backend`` on ``device``."""
    cuda = device.type == "cuda" and torch.cuda.is_available()
    site = Site(device, group)
    missing: dict[str, str] = {}
    where = None if cuda else f"this run's device is {device.type}, not CUDA"
    for feature, probe in PROBES.items():
        why = where if where and feature != "torchcomms" else run_probe(probe, site)
        if why:
            missing[feature] = why
    return Capabilities(backend, device.type, torch.__version__, _nccl_version(backend, cuda), missing,
                        frozenset(f"symm_mem::{op}" for op in SYMMETRIC_OPS if _has_cuda_kernel(op)))


def run_probe(probe: Callable[[Site], str | None], site: Site) -> str | None:
    """One feature's probe; what it raised becomes the reason the feature is missing."""
    try:
        return probe(site)
    except Exception as exc:  # noqa: BLE001 - any failure to probe means the feature cannot be counted on
        return f"probing it raised {type(exc).__name__}: {brief(exc)}"


def _nccl_version(backend: str, cuda: bool) -> tuple[int, ...] | None:
    if backend != "nccl" or not cuda:
        return None
    version = torch.cuda.nccl.version()
    return tuple(version) if isinstance(version, tuple) else (version // 1000, version % 1000 // 100,
                                                              version % 100)


def _has_cuda_kernel(op: str) -> bool:
    has_kernel = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if has_kernel is None:
        return False
    try:
        return bool(has_kernel(f"symm_mem::{op}", "CUDA"))
    except RuntimeError:  # no such op in this torch
        return False


def _nccl_class() -> Any:
    return getattr(dist, "ProcessGroupNCCL", None)


def _mem_pool(site: Site) -> str | None:
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        return f"torch {torch.__version__} has no torch.cuda.MemPool"
    nccl = _nccl_class()
    if nccl is None:
        return f"torch {torch.__version__} is built without NCCL"
    lacking = [name for name in ("mem_allocator", "register_mem_pool", "deregister_mem_pool",
                                 "supports_tensor_alloc") if not hasattr(nccl, name)]
    if lacking:
        return f"ProcessGroupNCCL in torch {torch.__version__} has no {', '.join(lacking)}"
    return tensor_allocation_refusal((site.group or dist.group.WORLD)._get_backend(site.device), site.device)


def tensor_allocation_refusal(group_backend: Any, device: torch.device) -> str | None:
    """Why the run's communicator cannot hand out NCCL's allocator: torch's ``mem_allocator`` getter
    raises ('NCCL mem allocator is not supported in this NCCL version') wherever
    ``supports_tensor_alloc`` is false (it asks for ncclMemAlloc and the device's multicast support)."""
    if group_backend.supports_tensor_alloc(device):
        return None
    return (f"the run's communicator cannot allocate NCCL tensors on {device} "
            f"({type(group_backend).__name__}.supports_tensor_alloc is false: NCCL's allocator needs "
            "NCCL 2.19+ and a device and driver with multicast)")


def _symmetric_module() -> Any:
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as exc:
        return exc
    return symm_mem


def _symm_mem(site: Site) -> str | None:
    module = _symmetric_module()
    if isinstance(module, ImportError):
        return f"torch {torch.__version__} has no torch.distributed._symmetric_memory ({module})"
    lacking = [name for name in ("empty", "rendezvous", "set_backend", "get_backend", "get_mem_pool",
                                 "get_mempool_allocator") if not hasattr(module, name)]
    return f"torch {torch.__version__}'s symmetric memory has no {', '.join(lacking)}" if lacking else None


def _nccl_window(site: Site) -> str | None:
    return _symm_mem(site)


def _cta_policy(site: Site) -> str | None:
    nccl = _nccl_class()
    if nccl is None:
        return f"torch {torch.__version__} is built without NCCL"
    if not hasattr(nccl, "NCCL_CTA_POLICY_ZERO"):
        return f"ProcessGroupNCCL in torch {torch.__version__} has no NCCL_CTA_POLICY_ZERO"
    if not hasattr(nccl.Options().config, "cta_policy"):
        return f"ProcessGroupNCCL.Options().config in torch {torch.__version__} has no cta_policy"
    return None


def _multicast(site: Site) -> str | None:
    """What torch's multicast check reads (c10d::cuda::deviceSupportsMulticast: a CUDA 12.3+ build, a
    driver with cuMulticastCreate, the device's CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED), asked of the
    driver directly: torch's own question goes through its symmetric-memory allocator."""
    built = tuple(int(part) for part in (torch.version.cuda or "0.0").split(".")[:2])
    if built < MULTICAST_CUDA:
        return f"torch {torch.__version__} is built with CUDA {torch.version.cuda}: multicast needs 12.3+"
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no CUDA driver library to ask about multicast ({exc})"
    if not hasattr(driver, "cuMulticastCreate"):
        return "this CUDA driver has no multicast objects (cuMulticastCreate: driver 535 or later)"
    handle, supported = ctypes.c_int(0), ctypes.c_int(0)
    for call in (lambda: driver.cuInit(0), lambda: driver.cuDeviceGet(ctypes.byref(handle), site.index),
                 lambda: driver.cuDeviceGetAttribute(ctypes.byref(supported),
                                                     CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, handle)):
        if (status := call()) != 0:
            return f"the CUDA driver cannot say whether cuda:{site.index} has multicast (CUresult {status})"
    if not supported.value:
        return f"cuda:{site.index} has no multicast support (NVLink SHARP: NVSwitch with NVLS)"
    return None


def _nvshmem(site: Site) -> str | None:
    module = _symmetric_module()
    if isinstance(module, ImportError) or not hasattr(module, "is_nvshmem_available"):
        return f"torch {torch.__version__} has no symm_mem.is_nvshmem_available"
    if not module.is_nvshmem_available():
        return f"NVSHMEM is not available to torch {torch.__version__} here (symm_mem.is_nvshmem_available)"
    return None


def _torchcomms(site: Site) -> str | None:
    if importlib.util.find_spec("torchcomms") is None:
        return "the torchcomms package is not installed (pip install torchcomms)"
    return None


def _profiler(site: Site) -> str | None:
    activities = torch.profiler.supported_activities()
    if torch.profiler.ProfilerActivity.CUDA not in activities:
        return f"torch {torch.__version__}'s profiler has no CUDA activity"
    return None


PROBES: dict[str, Callable[[Site], str | None]] = {
    "nccl-mem-pool": _mem_pool, "nccl-window": _nccl_window, "nccl-cta-policy": _cta_policy,
    "symm-mem": _symm_mem, "multicast": _multicast, "nvshmem": _nvshmem, "torchcomms": _torchcomms,
    "profiler": _profiler}
assert set(PROBES) == set(FEATURES), "every feature has its probe"
