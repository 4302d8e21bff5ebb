"""The size rules that stand between commbench and a kernel that would assert on the device or write out of
bounds (a device-side assert ends the CUDA context of every rank): each refuses exactly the sizes on which
the kernel, as torch 2.11 and 2.14 write it, goes wrong. The kernels are simulated here step by step,
from their sources, independently of the rules' closed forms:

- NVSHMEM's all-to-all-v (torch/csrc/distributed/c10d/symm_mem/nvshmem_extension.cu): ``get_a2a_nblocks``
  launches ceil(input bytes / (16 B x 512 threads x 8 loops)) blocks, rounded up to a multiple of the
  ranks, at most 64 within a host (16 across hosts); ``allToAllV`` gives each peer
  max(gridDim.x / npes, 1) blocks and asserts ``block_size * blocks_per_peer == peer_size``.
- the multimem all-gather (CUDASymmetricMemoryOps.cu, ``multimem_all_gather_out``): its vector width is
  ``get_and_verify_alignment(out)`` (the largest of 16, 8, 4 dividing the output's bytes; its offset is
  0 here), and thread t of the grid moves that many bytes from offset i = t x width of this rank's chunk
  to ``bytes_per_rank x rank + i`` of the output, for every i below bytes_per_rank.
"""

import math

from hypothesis import given
from hypothesis import strategies as st

from commbench.measure.impls import REGISTRY, SizeFacts

NVSHMEM, MULTIMEM = REGISTRY["nvshmem-a2av"], REGISTRY["symm-multimem"]
ELEMENT_SIZES = st.sampled_from([1, 2, 4, 8])


def all_to_all_vdev_asserts(sends: list[list[int]], element_size: int, one_host: bool) -> bool:
    """Whether torch's allToAllV kernel asserts on any rank (``sends[i][j]``: elements rank i sends j)."""
    npes = len(sends)
    for mype in range(npes):
        input_size = sum(sends[mype]) * element_size
        num_blocks = math.ceil(input_size / (16 * 512 * 8))
        num_blocks = math.ceil(num_blocks / npes) * npes  # at::round_up(num_blocks, world_size)
        num_blocks = min(num_blocks, 64 if one_host else 16)
        for bid in range(num_blocks):  # every block of the grid, as the device runs them
            blocks_per_peer = max(num_blocks // npes, 1)
            for i in range(bid // blocks_per_peer, npes, num_blocks // blocks_per_peer):
                peer = (mype + i) % npes
                peer_size = sends[peer][mype] * element_size
                block_size = peer_size // blocks_per_peer
                if block_size * blocks_per_peer != peer_size:
                    return True
    return False


def test_nvshmem_all_to_all_refuses_the_issue_case_and_runs_the_even_one():
    # all_to_all_single of 1 MiB float32 at 6 ranks: 43690 elements a peer, 1048560 bytes in, 18 blocks,
    # 3 a peer, 174760 bytes from each peer: 174760 = 3 x 58253 + 1
    refusal = NVSHMEM.size_refusal(SizeFacts("all_to_all_single", 43690, 4, 6))
    assert refusal == ("torch's all_to_all_vdev splits each peer's bytes over 3 blocks, and rank 0 gets "
                       "174760 bytes from rank 0: the kernel would assert")
    assert NVSHMEM.size_refusal(SizeFacts("all_to_all_single", 32768, 4, 8)) is None  # 1 MiB at 8 ranks
    # below 64 KiB x ranks every peer has one block: anything runs
    assert NVSHMEM.size_refusal(SizeFacts("all_to_all_single", 2731, 4, 6)) is None


@given(ranks=st.integers(1, 8), count=st.integers(1, 1 << 20), element_size=ELEMENT_SIZES,
       one_host=st.booleans())
def test_nvshmem_all_to_all_single_is_refused_exactly_where_its_kernel_asserts(ranks, count, element_size,
                                                                                one_host):
    facts = SizeFacts("all_to_all_single", count, element_size, ranks, one_host=one_host)
    sends = [[count] * ranks for _ in range(ranks)]
    assert (NVSHMEM.size_refusal(facts) is not None) == all_to_all_vdev_asserts(sends, element_size, one_host)


@given(data=st.data(), ranks=st.integers(2, 8), element_size=ELEMENT_SIZES, one_host=st.booleans())
def test_nvshmem_all_to_allv_is_refused_exactly_where_its_kernel_asserts(data, ranks, element_size, one_host):
    row = st.lists(st.integers(1, 300_000), min_size=ranks, max_size=ranks)
    sends = data.draw(st.lists(row, min_size=ranks, max_size=ranks))
    facts = SizeFacts("all_to_allv", max(map(max, sends)), element_size, ranks,
                      tuple(tuple(line) for line in sends), one_host)
    assert (NVSHMEM.size_refusal(facts) is not None) == all_to_all_vdev_asserts(sends, element_size, one_host)


def multimem_all_gather_goes_wrong(count_per_rank: int, element_size: int, ranks: int) -> bool:
    """Whether any rank's vector read leaves its chunk, or its write lands outside its own chunk or at an
    address not aligned to the vector (torch refuses outputs not aligned to max(4, element) first)."""
    chunk = count_per_rank * element_size
    out_bytes = chunk * ranks
    width = next(width for width in (16, 8, 4, 2, 1) if out_bytes % width == 0)
    if width < max(4, element_size):
        return True  # get_and_verify_alignment's TORCH_CHECK
    for rank in range(ranks):
        start = chunk * rank
        for offset in range(0, chunk, width):
            write = start + offset
            if offset + width > chunk or write % width:
                return True
    return False


def test_the_multimem_all_gather_refuses_a_chunk_its_vectors_overrun():
    # 1 float32 a rank at 4 ranks: a 16-byte output, so 16-byte vectors, over 4-byte chunks
    assert MULTIMEM.size_refusal(SizeFacts("all_gather_base", 1, 4, 4)) == (
        "torch's multimem all-gather writes 16-byte vectors (its output's alignment) into each rank's chunk: "
        "the chunk must be a multiple of 16 bytes (here 4)")
    assert MULTIMEM.size_refusal(SizeFacts("all_gather_base", 4, 4, 4)) is None
    assert MULTIMEM.size_refusal(SizeFacts("all_reduce", 1, 4, 4)) is None  # all-reduce: 4-byte rule only


@given(count=st.integers(1, 4096), element_size=ELEMENT_SIZES, ranks=st.integers(1, 8))
def test_the_multimem_all_gather_is_refused_exactly_where_its_kernel_goes_wrong(count, element_size, ranks):
    refused = MULTIMEM.size_refusal(SizeFacts("all_gather_base", count, element_size, ranks)) is not None
    assert refused == multimem_all_gather_goes_wrong(count, element_size, ranks)
