"""--profile-kernels: what one op ran, by name, from torch's profiler.

On CUDA the device's activity: kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
``ncclSymkDevKernel_...``, ``one_shot_all_reduce_kernel<float, 16, 2>``) and copies (``Memcpy DtoD``); on
CPU, where nothing runs on a device, the backend's own calls (``gloo:all_reduce``, ``c10d::allreduce_``).
Names are kept once each, in the order they first ran.
"""

import re
from collections.abc import Callable

import torch

HOST_CALLS = re.compile(r"^(?:c10d::|gloo:|nccl:|mpi:|ucc:)")


def kernel_names(run: Callable[[], None], device: torch.device) -> list[str]:
    """The names ``run()`` (one op, completed inside it) ran under the profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as recorded:
        run()
    names = [event.name for event in recorded.events()
             if (event.device_type == DeviceType.CUDA if cuda else HOST_CALLS.match(event.name))]
    return list(dict.fromkeys(names))
