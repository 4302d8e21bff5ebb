"""nvshmem-a2av: NVSHMEM's all-to-all-v (torch.ops.symm_mem.all_to_all_vdev) over torch's symmetric memory
on NVSHMEM (symm_mem.set_backend('NVSHMEM')): the splits live on the device, as MoE dispatch keeps them.

Every buffer is symmetric: the same size on every rank, so uneven buffers take the largest rank's size.
NVSHMEM moves bytes, so any dtype runs. torch holds one symmetric-memory backend per process: a run that
also asks for torch's CUDA symmetric kernels gets this one refused with that reason.
"""

from dataclasses import dataclass

from commbench.core.paths import PathSpec
from commbench.measure.impls.base import ANY, Evidence, Implementation, Issue, Needs, register


def _a2av(backend, args) -> None:  # Backend, CollectiveArgs
    backend.all_to_all_vdev(args)


@dataclass(frozen=True, kw_only=True)
class DeviceSplitsAllToAll(Implementation):
    """Every collective it runs is an all-to-all by all_to_all_vdev, over NVSHMEM's symmetric heap."""

    @property
    def path(self) -> PathSpec:
        return PathSpec(memory="nvshmem")

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return _a2av


NVSHMEM_A2AV = register(DeviceSplitsAllToAll(
    name="nvshmem-a2av", summary="NVSHMEM all_to_all_vdev: all-to-all with device-side splits",
    collectives=("all_to_all_single", "all_to_allv"),
    needs=Needs(backend="", features=("symm-mem", "nvshmem"), kernels={ANY: ("all_to_all_vdev",)}),
    evidence=Evidence(proof=r"allToAllV", proof_text="NVSHMEM's allToAllV kernel")))
