"""The software side of a host: kernel and distribution, container hints, and the torch build (with its
CUDA, cuDNN and NCCL versions).

Invariants: as every probe (probing.py): a question the host cannot answer raises ProbeMissing; torch is
imported only inside probe_software, so reading saved records never needs it.
"""

import platform
from typing import Any

from commbench.provenance.probing import ProbeMissing, Roots, read_optional, read_text

# Build settings worth keeping from torch.__config__.show() (the compiler flags are long and say little).
BUILD_KEYS = ("TORCH_VERSION", "BUILD_TYPE", "CUDA_VERSION", "CUDNN_VERSION", "USE_CUDA", "USE_CUDNN",
              "USE_NCCL", "USE_SYSTEM_NCCL", "USE_GLOO", "USE_MPI", "USE_UCC", "USE_ROCM", "USE_XPU",
              "BLAS_INFO")
CONTAINER_VARIABLES = ("KUBERNETES_SERVICE_HOST", "SLURM_JOB_ID", "SINGULARITY_CONTAINER",
                       "APPTAINER_CONTAINER")


def probe_os(roots: Roots) -> dict[str, Any]:
    kernel = read_text(roots.proc / "sys" / "kernel" / "osrelease")
    release = read_optional(roots.root / "etc" / "os-release") or ""
    pretty = next((line.partition("=")[2].strip().strip('"') for line in release.splitlines()
                   if line.startswith("PRETTY_NAME=")), "")
    return {"kernel": kernel, "distribution": pretty, "machine": platform.machine()}


def _cgroup_limits(roots: Roots) -> dict[str, Any]:
    """The CPU and memory a cgroup v2 grants this process's container ('max': none)."""
    base = roots.sys / "fs" / "cgroup"
    limits: dict[str, Any] = {}
    cpu_max = read_optional(base / "cpu.max")
    if cpu_max and not cpu_max.startswith("max"):
        quota, _, period = cpu_max.partition(" ")
        limits["cpu_limit"] = round(int(quota) / int(period or 100000), 2)
    memory_max = read_optional(base / "memory.max")
    if memory_max and memory_max.isdigit():
        limits["memory_limit_bytes"] = int(memory_max)
    return limits


def probe_container(roots: Roots) -> dict[str, Any]:
    """Signs that this process runs in a container or under a scheduler, each named in ``hints``."""
    hints = [marker for marker in ("/.dockerenv", "/run/.containerenv")
             if (roots.root / marker.lstrip("/")).exists()]
    hints += [name for name in CONTAINER_VARIABLES if name in roots.environ]
    cgroup = read_optional(roots.proc / "self" / "cgroup") or ""
    # cgroup v1 lists a line per controller; v2 one '0::/path' line. A path other than '/' is a slice of
    # the machine, as container runtimes and schedulers make.
    paths = sorted({line.split(":", 2)[2] for line in cgroup.splitlines() if line.count(":") >= 2} - {"/"})
    hints += [f"cgroup {path}" for path in paths]
    unified = cgroup.strip().startswith("0::") and len(cgroup.splitlines()) == 1
    version = (2 if unified else 1) if cgroup else None
    return {"containerized": bool(hints), "hints": hints, "cgroup_version": version, **_cgroup_limits(roots)}


def _build_settings(text: str) -> dict[str, str]:
    line = next((line for line in text.splitlines() if "Build settings:" in line), "")
    settings = {}
    for item in line.partition("Build settings:")[2].split(", "):
        key, _, value = item.partition("=")
        if key.strip() in BUILD_KEYS:
            settings[key.strip()] = value.strip()
    return settings


def probe_software() -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:
        raise ProbeMissing(f"torch does not import: {exc}") from None
    found: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "torch_git": torch.version.git_version, "cuda": torch.version.cuda or "",
                             "cudnn": "", "nccl": ""}
    if torch.backends.cudnn.is_available():
        found["cudnn"] = str(torch.backends.cudnn.version())
    if torch.distributed.is_available() and torch.distributed.is_nccl_available():
        try:
            version = torch.cuda.nccl.version()
            found["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except (RuntimeError, AttributeError) as exc:
            found["nccl"] = f"unknown ({exc})"
    config = torch.__config__.show()
    found["build"] = _build_settings(config)
    found["cpu_capability"] = next((line.partition(":")[2].strip() for line in config.splitlines()
                                    if "CPU capability usage" in line), "")
    return found
