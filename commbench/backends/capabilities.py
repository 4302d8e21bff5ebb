"""Probing what this process's torch, NCCL and device offer the implementations (core/paths.py): by the
API surface that exists, never by trying an op. Each missing feature gets its reason.

Runs on every rank at the start of a sweep that asks for an implementation other than c10d; nothing here
allocates device memory or starts a communicator.
"""

import importlib.util
from typing import Any

import torch
import torch.distributed as dist

from commbench.core.paths import FEATURES, Capabilities

# The torch ops the implementations call, whose CUDA kernels a build may lack (a CPU build has none).
SYMMETRIC_OPS = ("one_shot_all_reduce_out", "two_shot_all_reduce_", "two_shot_all_reduce_out",
                 "multimem_all_reduce_", "multimem_one_shot_all_reduce_out", "multimem_all_gather_out",
                 "reduce_scatter_out", "all_to_all_vdev")


def probe_capabilities(backend: str, device: torch.device) -> Capabilities:
    """This process's capabilities for ``backend`` on ``device``."""
    cuda = device.type == "cuda" and torch.cuda.is_available()
    missing: dict[str, str] = {}
    where = None if cuda else f"this run's device is {device.type}, not CUDA"
    for feature, probe in PROBES.items():
        why = where if where and feature != "torchcomms" else probe(device)
        if why:
            missing[feature] = why
    return Capabilities(backend, device.type, torch.__version__, _nccl_version(backend, cuda), missing,
                        frozenset(f"symm_mem::{op}" for op in SYMMETRIC_OPS if _has_cuda_kernel(op)))


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


def _mem_pool(device: torch.device) -> str | None:
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        return f"torch {torch.__version__} has no torch.cuda.MemPool"
    nccl = _nccl_class()
    if nccl is None:
        return f"torch {torch.__version__} is built without NCCL"
    lacking = [name for name in ("mem_allocator", "register_mem_pool", "deregister_mem_pool")
               if not hasattr(nccl, name)]
    return f"ProcessGroupNCCL in torch {torch.__version__} has no {', '.join(lacking)}" if lacking else None


def _symmetric_module() -> Any:
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as exc:
        return exc
    return symm_mem


def _symm_mem(device: torch.device) -> str | None:
    module = _symmetric_module()
    if isinstance(module, ImportError):
        return f"torch {torch.__version__} has no torch.distributed._symmetric_memory ({module})"
    lacking = [name for name in ("empty", "rendezvous", "set_backend", "get_backend", "get_mem_pool")
               if not hasattr(module, name)]
    return f"torch {torch.__version__}'s symmetric memory has no {', '.join(lacking)}" if lacking else None


def _nccl_window(device: torch.device) -> str | None:
    return _symm_mem(device)


def _cta_policy(device: torch.device) -> str | None:
    nccl = _nccl_class()
    if nccl is None:
        return f"torch {torch.__version__} is built without NCCL"
    if not hasattr(nccl, "NCCL_CTA_POLICY_ZERO"):
        return f"ProcessGroupNCCL in torch {torch.__version__} has no NCCL_CTA_POLICY_ZERO"
    if not hasattr(nccl.Options().config, "cta_policy"):
        return f"ProcessGroupNCCL.Options().config in torch {torch.__version__} has no cta_policy"
    return None


def _multicast(device: torch.device) -> str | None:
    try:
        from torch._C._autograd import DeviceType
        from torch._C._distributed_c10d import _SymmetricMemory
    except ImportError as exc:
        return f"torch {torch.__version__} has no symmetric memory ({exc})"
    index = device.index if device.index is not None else torch.cuda.current_device()
    if not _SymmetricMemory.has_multicast_support(DeviceType.CUDA, index):
        return f"cuda:{index} has no multicast support (NVLink SHARP, CUDA driver and torch's allocator)"
    return None


def _nvshmem(device: torch.device) -> str | None:
    module = _symmetric_module()
    if isinstance(module, ImportError) or not hasattr(module, "is_nvshmem_available"):
        return f"torch {torch.__version__} has no symm_mem.is_nvshmem_available"
    if not module.is_nvshmem_available():
        return f"NVSHMEM is not available to torch {torch.__version__} here (symm_mem.is_nvshmem_available)"
    return None


def _torchcomms(device: torch.device) -> str | None:
    if importlib.util.find_spec("torchcomms") is None:
        return "the torchcomms package is not installed (pip install torchcomms)"
    return None


def _profiler(device: torch.device) -> str | None:
    activities = torch.profiler.supported_activities()
    if torch.profiler.ProfilerActivity.CUDA not in activities:
        return f"torch {torch.__version__}'s profiler has no CUDA activity"
    return None


PROBES = {"nccl-mem-pool": _mem_pool, "nccl-window": _nccl_window, "nccl-cta-policy": _cta_policy,
          "symm-mem": _symm_mem, "multicast": _multicast, "nvshmem": _nvshmem, "torchcomms": _torchcomms,
          "profiler": _profiler}
assert set(PROBES) == set(FEATURES), "every feature has its probe"
