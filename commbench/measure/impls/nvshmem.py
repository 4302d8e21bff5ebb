"""nvshmem-a2av: NVSHMEM's all-to-all-v (torch.ops.symm_mem.all_to_all_vdev) over torch's symmetric memory
on NVSHMEM (symm_mem.set_backend('NVSHMEM')): the splits live on the device, as MoE dispatch keeps them.

Every buffer is symmetric: the same size on every rank, so uneven buffers take the largest rank's size.
NVSHMEM moves bytes, so any dtype runs. torch holds one symmetric-memory backend per process: a run that
also asks for torch's CUDA symmetric kernels gets this one refused with that reason.
"""

from commbench.core.paths import PathSpec
from commbench.measure.impls.base import ANY, Evidence, Implementation, Needs, register


def _a2av(backend, args) -> None:  # Backend, CollectiveArgs
    backend.all_to_all_vdev(args)


NVSHMEM_A2AV = register(Implementation(
    name="nvshmem-a2av", summary="NVSHMEM all_to_all_vdev: all-to-all with device-side splits",
    collectives=("all_to_all_single", "all_to_allv"), path=PathSpec(memory="nvshmem"),
    needs=Needs(backend="", features=("symm-mem", "nvshmem"), kernels={ANY: ("all_to_all_vdev",)}),
    issue={"all_to_all_single": _a2av, "all_to_allv": _a2av},
    evidence=Evidence(proof=r"allToAllV", proof_text="NVSHMEM's allToAllV kernel")))
