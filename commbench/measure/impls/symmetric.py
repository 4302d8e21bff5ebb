"""torch's symmetric-memory kernels (torch.ops.symm_mem, CUDA backend of torch.distributed._symmetric_memory):
buffers from symm_mem.empty, rendezvoused over the group, then torch's own kernels instead of NCCL.

What they take, from torch's CUDASymmetricMemoryOps.cu (torch 2.8 to 2.14): float32 and bfloat16, sum
only; every buffer's bytes (and offset) a multiple of max(4, element size); two-shot out of place and
reduce_scatter_out at 2, 4 or 8 ranks; reduce_scatter_out needs the elements a multiple of ranks x
(alignment / element size). One-shot reads every peer's buffer while it writes its output, so it runs
out of place only; reduce_scatter_out likewise. multimem needs multicast (NVLink SHARP), and its
all-gather moves vectors as wide as its whole output's alignment (up to 16 bytes) into each rank's chunk
at rank x chunk, so the chunk must be a multiple of that width (multimem_all_gather_out). torch refuses
the rest with an error, or would write out of bounds, so these rules make refusals rows, before
anything runs. The peers' buffers are shared between the processes of one host: a group spanning
hosts is refused too (torch would fail at the rendezvous).
"""

from collections.abc import Mapping
from dataclasses import dataclass

from commbench.core.paths import PathSpec
from commbench.measure.collectives.base import IN_PLACE, OUT_OF_PLACE
from commbench.measure.impls.base import (
    ANY,
    Evidence,
    Implementation,
    Issue,
    Needs,
    SizeFacts,
    aligned,
    power_of_two_factor,
    register,
)

KERNEL_DTYPES = ("float32", "bfloat16")
SUM = {ANY: ("sum",)}
TWO_SHOT_GROUPS = (2, 4, 8)
ONE_HOST = "torch's CUDA symmetric memory maps its peers' buffers through handles shared within a host"


@dataclass(frozen=True, kw_only=True)
class SymmetricKernels(Implementation):
    """Buffers in torch's symmetric memory (CUDA backend), each collective by the torch kernel
    ``kernels`` names for it (a Backend method)."""

    kernels: Mapping[str, Issue]
    memory: str = "symmetric"  # or multicast, whose set-up has torch confirm the device's multicast

    @property
    def path(self) -> PathSpec:
        return PathSpec(memory=self.memory)

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return self.kernels[collective]


def buffer_aligned(facts: SizeFacts) -> str | None:
    """Each buffer's bytes a multiple of max(4, element size): the per-rank chunk and the whole."""
    whole = facts.count_per_rank * facts.element_size * (1 if facts.collective == "all_reduce"
                                                         else facts.group_size)
    chunk = facts.count_per_rank * facts.element_size
    if aligned(whole, facts.element_size) and aligned(chunk, facts.element_size):
        return None
    return f"torch's symmetric kernels need buffers of a multiple of {max(4, facts.element_size)} bytes " \
           f"(here {chunk} per rank)"


def reduce_scatter_aligned(facts: SizeFacts) -> str | None:
    """reduce_scatter_out: elements a multiple of ranks x (alignment / element size), the alignment the
    largest power of two up to 16 dividing the input's bytes."""
    if (why := buffer_aligned(facts)) is not None:
        return why
    total = facts.count_per_rank * facts.group_size
    alignment = power_of_two_factor(total * facts.element_size)
    unit = facts.group_size * max(1, alignment // facts.element_size)
    if alignment < max(4, facts.element_size) or total % unit:
        return f"torch's reduce_scatter_out needs the elements a multiple of {unit} (here {total})"
    return None


def per_collective_alignment(facts: SizeFacts) -> str | None:
    if facts.collective == "reduce_scatter_base":
        return reduce_scatter_aligned(facts)
    return buffer_aligned(facts)


def multimem_aligned(facts: SizeFacts) -> str | None:
    """multimem_all_gather_out: each thread moves a vector of the output's alignment (the largest power
    of two up to 16 dividing its bytes) from offset i of this rank's chunk to rank x chunk + i, for i
    below the chunk; a chunk that is not a multiple of that width is read past its end and written into
    the next rank's chunk, at misaligned addresses."""
    if (why := buffer_aligned(facts)) is not None or facts.collective != "all_gather_base":
        return why
    chunk = facts.count_per_rank * facts.element_size
    width = power_of_two_factor(chunk * facts.group_size)
    if chunk % width:
        return f"torch's multimem all-gather writes {width}-byte vectors (its output's alignment) into " \
               f"each rank's chunk: the chunk must be a multiple of {width} bytes (here {chunk})"
    return None


def two_shot_groups(collective: str, placement: str, ranks: int) -> str | None:
    """torch dispatches two-shot out of place, and reduce_scatter_out, for 2, 4 and 8 ranks only."""
    if (collective == "reduce_scatter_base" or placement == OUT_OF_PLACE) and ranks not in TWO_SHOT_GROUPS:
        return f"{collective} {placement} runs at 2, 4 or 8 ranks only (here {ranks})"
    return None


ONE_SHOT = register(SymmetricKernels(
    name="symm-one-shot", summary="torch's one-shot all-reduce: every rank reads every peer's buffer",
    collectives=("all_reduce",),
    needs=Needs(backend="", features=("symm-mem",), kernels={ANY: ("one_shot_all_reduce_out",)},
                dtypes={ANY: KERNEL_DTYPES}, ops=SUM, placements={ANY: (OUT_OF_PLACE,)}, one_host=ONE_HOST,
                sizes=buffer_aligned, sizes_text="buffers a multiple of 4 bytes"),
    kernels={"all_reduce": lambda backend, args: backend.one_shot_all_reduce(args)},
    evidence=Evidence(proof=r"one_shot_all_reduce", proof_text="torch's one_shot_all_reduce kernel")))

TWO_SHOT = register(SymmetricKernels(
    name="symm-two-shot", summary="torch's two-shot all-reduce (reduce-scatter, then all-gather) and its "
                                  "reduce-scatter",
    collectives=("all_reduce", "reduce_scatter_base"),
    needs=Needs(backend="", features=("symm-mem",),
                kernels={"all_reduce": ("two_shot_all_reduce_", "two_shot_all_reduce_out"),
                         "reduce_scatter_base": ("reduce_scatter_out",)},
                dtypes={ANY: KERNEL_DTYPES}, ops=SUM, placements={"reduce_scatter_base": (OUT_OF_PLACE,)},
                one_host=ONE_HOST, groups=two_shot_groups,
                groups_text="out of place and reduce-scatter: 2, 4 or 8 ranks",
                sizes=per_collective_alignment, sizes_text="buffers a multiple of 4 bytes; reduce-scatter: "
                                                           "elements a multiple of ranks x 16 B / element"),
    kernels={"all_reduce": lambda backend, args: backend.two_shot_all_reduce(args),
             "reduce_scatter_base": lambda backend, args: backend.symmetric_reduce_scatter(args)},
    evidence=Evidence(proof=r"two_shot_all_reduce", proof_text="torch's two_shot_all_reduce kernels")))

MULTIMEM = register(SymmetricKernels(
    name="symm-multimem", summary="torch's multimem (NVLink SHARP) all-reduce and all-gather",
    collectives=("all_reduce", "all_gather_base"),
    needs=Needs(backend="", features=("symm-mem", "multicast"),
                kernels={"all_reduce": ("multimem_all_reduce_", "multimem_one_shot_all_reduce_out"),
                         "all_gather_base": ("multimem_all_gather_out",)},
                dtypes={"all_reduce": KERNEL_DTYPES}, ops=SUM,
                placements={"all_reduce": (IN_PLACE, OUT_OF_PLACE)}, one_host=ONE_HOST,
                sizes=multimem_aligned,
                sizes_text="buffers a multiple of 4 bytes; all-gather: each rank's chunk a multiple of its "
                           "output's alignment (16 B at most)"),
    kernels={"all_reduce": lambda backend, args: backend.multimem_all_reduce(args),
             "all_gather_base": lambda backend, args: backend.multimem_all_gather(args)},
    memory="multicast",
    evidence=Evidence(proof=r"multimem_", proof_text="torch's multimem kernels")))
