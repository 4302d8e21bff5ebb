"""nvshmem-a2av: NVSHMEM's all-to-all-v (torch.ops.symm_mem.all_to_all_vdev) over torch's symmetric memory
on NVSHMEM (symm_mem.set_backend('NVSHMEM')): the splits live on the device, as MoE dispatch keeps them.

Every buffer is symmetric: the same size on every rank, so uneven buffers take the largest rank's size.
NVSHMEM moves bytes, so any dtype runs. torch holds one symmetric-memory backend per process: this one
runs in rank processes of its own when the run also asks for another (docs/implementations.md).

The size rule is the kernel's own arithmetic (torch's nvshmem_extension.cu, torch 2.9 to 2.14): each rank
launches ``get_a2a_nblocks`` blocks from its own input's bytes (one per 64 KiB, rounded up to a multiple
of the ranks, at most 64 when the group is one host's, 16 otherwise) and gives each peer
``blocks_per_peer = max(blocks // ranks, 1)`` of them; the kernel asserts on the device that each peer's
bytes divide evenly among those blocks, and a device-side assert ends the CUDA context. So a size is
refused when any receiver's share from any peer does not divide, or when a rank sends nothing (it would
launch no blocks). torch's TORCH_SYMMMEM_NBLOCKS, which replaces the count, is not read here.
"""

from dataclasses import dataclass

from commbench.core.paths import PathSpec
from commbench.measure.impls.base import ANY, Evidence, Implementation, Issue, Needs, SizeFacts, register

A2A_CHUNK_BYTES = 16 * 512 * 8  # get_a2a_nblocks: 16 bytes a thread, 512 threads a block, 8 loops
A2A_MAX_BLOCKS_ONE_HOST, A2A_MAX_BLOCKS_ACROSS_HOSTS = 64, 16


def a2a_blocks(input_bytes: int, ranks: int, one_host: bool) -> int:
    """The blocks torch's all_to_all_vdev launches on a rank whose input holds ``input_bytes``."""
    blocks = -(-input_bytes // A2A_CHUNK_BYTES)
    blocks = -(-blocks // ranks) * ranks
    return min(blocks, A2A_MAX_BLOCKS_ONE_HOST if one_host else A2A_MAX_BLOCKS_ACROSS_HOSTS)


def whole_blocks_per_peer(facts: SizeFacts) -> str | None:
    """Why all_to_all_vdev's kernel would assert (or launch nothing) at this size; None when it runs."""
    sends, ranks, element = facts.sends(), facts.group_size, facts.element_size
    for receiver in range(ranks):
        input_bytes = sum(sends[receiver]) * element
        if input_bytes == 0:
            return f"rank {receiver} sends nothing at this size: all_to_all_vdev would launch no blocks"
        per_peer = max(a2a_blocks(input_bytes, ranks, facts.one_host) // ranks, 1)
        for peer in range(ranks):
            received = sends[peer][receiver] * element
            if received % per_peer:
                return (f"torch's all_to_all_vdev splits each peer's bytes over {per_peer} blocks, and rank "
                        f"{receiver} gets {received} bytes from rank {peer}: the kernel would assert")
    return None


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
    needs=Needs(backend="", features=("symm-mem", "nvshmem"), kernels={ANY: ("all_to_all_vdev",)},
                sizes=whole_blocks_per_peer,
                sizes_text="each peer's bytes a multiple of the kernel's blocks per peer"),
    evidence=Evidence(proof=r"allToAllV", proof_text="NVSHMEM's allToAllV kernel")))
