"""torch holds one symmetric-memory backend per process, fixed once its allocator is used: what commbench
does before an implementation's set-up must leave the choice free. On a CUDA build of torch (no GPU
needed: the CI legs that install one run this), in a fresh interpreter: every capability probe runs for a
CUDA device, then nccl-symm's and nvshmem-a2av's backends can still be chosen, while torch's own
multicast question (what the probe asked before) takes the choice away.
"""

import json
import subprocess
import sys

import pytest
import torch

from tests.dist_helpers import ROOT, launcherless_env

pytestmark = [pytest.mark.processes,
              pytest.mark.skipif(torch.version.cuda is None,
                                 reason="a CPU build of torch registers no CUDA symmetric-memory allocator")]

# Run in a fresh interpreter: torch's allocator map is process state that no test may leave changed.
PROGRAM = """
import json, torch
import torch.distributed._symmetric_memory as symm_mem
from commbench.backends.capabilities import PROBES, Site, probe_capabilities, run_probe
from commbench.backends.paths import MEMORY_KINDS

device = torch.device("cuda", 0)
found = {}
# a one-rank communicator for the probe that asks the run's own (gloo: it allocates no NCCL tensors)
torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
# every probe as a CUDA rank runs it (probe_capabilities skips them all where CUDA is unavailable)
found["reasons"] = {feature: run_probe(probe, Site(device)) for feature, probe in PROBES.items()}
probe_capabilities("nccl", device)
choices = {}
for name in ("NVSHMEM", "NCCL"):
    try:
        symm_mem.set_backend(name)
        choices[name] = symm_mem.get_backend(device)
    except RuntimeError as exc:
        choices[name] = f"refused: {exc}"
found["choices"] = choices
# nccl-symm's set-up, up to its first collective: the memory kind chooses torch's NCCL backend
MEMORY_KINDS["nccl-window"].choose_backend(device)
found["nccl_symm_backend"] = symm_mem.get_backend(device)
# what the probe asked before: torch's multicast question goes through the allocator
from torch._C._autograd import DeviceType
from torch._C._distributed_c10d import _SymmetricMemory
try:
    _SymmetricMemory.has_multicast_support(DeviceType.CUDA, 0)
except RuntimeError:
    pass  # no driver here: it raises, and has marked the allocator in use all the same
try:
    symm_mem.set_backend("NVSHMEM")
    found["after_torch_multicast"] = "free"
except RuntimeError as exc:
    found["after_torch_multicast"] = str(exc)
print(json.dumps(found))
"""


def test_the_capability_probe_leaves_torch_free_to_choose_its_symmetric_memory_backend():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=240,
                            env=launcherless_env(), cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["choices"] == {"NVSHMEM": "NVSHMEM", "NCCL": "NCCL"}
    assert found["nccl_symm_backend"] == "NCCL"  # nccl-symm is no longer refused by the probe
    assert all(reason is None or "raised" not in reason for reason in found["reasons"].values()), found
    assert "supports_tensor_alloc is false" in found["reasons"]["nccl-mem-pool"]
    assert "Backend can not be changed after use" in found["after_torch_multicast"]
