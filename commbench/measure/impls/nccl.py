"""NCCL's own variants of the c10d call: user-buffer registration, symmetric windows and CTA policies.

Each issues torch.distributed's usual call (the collective's own); what differs is where its buffers
live and which communicator runs it, set up by the backend (backends/paths.py):
- nccl-ubr: buffers in a torch.cuda.MemPool over NCCL's allocator, registered with the communicator
  (ProcessGroupNCCL.register_mem_pool: ncclCommRegister), so NCCL works on them without staging copies.
- nccl-symm: buffers in torch's symmetric memory on NCCL (symm_mem.set_backend('NCCL'), its pool, then
  rendezvous: ncclCommWindowRegister), so NCCL may pick its symmetric kernels (ncclSymkDevKernel_*).
- cta-efficiency: a communicator of its own with NCCL_CTA_POLICY_EFFICIENCY, buffers registered as in
  nccl-ubr (NCCL then picks fewer channels where registration allows).
- cta-zero: a communicator of its own with NCCL_CTA_POLICY_ZERO, buffers in windows as in nccl-symm: NCCL
  runs all-gather and all-to-all on the copy engines (no kernel, no SM) on one node.

NCCL falls back silently where these do not apply; Evidence says what shows the path, and
``symmetric_kernel_fallback`` what NCCL's symmetric kernels do not take (NCCL 2.27 to 2.30).
"""

from dataclasses import dataclass

from commbench.core.paths import PathSpec
from commbench.measure.impls.base import Evidence, Implementation, Issue, Needs, Setting, register
from commbench.measure.impls.c10d import IN_PLACE_ONLY

REGISTERED_COLLECTIVES = ("all_reduce", "reduce_scatter_base", "all_gather_base", "all_to_all_single",
                          "all_to_allv", "broadcast", "reduce")
SYMMETRIC_KERNEL_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
REGISTRATION = Evidence(nccl_log="registration")


def symmetric_kernel_fallback(setting: Setting) -> str | None:
    """Why NCCL will run its regular kernels although the buffers are windows: its symmetric kernels
    all-gather any dtype, but all-reduce and reduce-scatter only sum floating-point types, not float64
    (sym_kernels.cc, NCCL 2.27 to 2.30)."""
    if setting.collective == "all_gather_base":
        return None
    if setting.op != "sum":
        return (f"NCCL's symmetric kernels reduce with sum only ({setting.op}): NCCL runs its regular "
                "kernels")
    if setting.dtype not in SYMMETRIC_KERNEL_DTYPES:
        return (f"NCCL's symmetric kernels take no {setting.dtype} (float32, float16, bfloat16, float8 "
                "only): NCCL runs its regular kernels")
    return None


@dataclass(frozen=True, kw_only=True)
class NcclBuffers(Implementation):
    """The collective's own call with its buffers in ``memory`` (nccl-registered or nccl-window), on the
    run's communicator or one of its own (``communicator``: cta-efficiency, cta-zero)."""

    memory: str
    communicator: str = "run"
    copies_out_of_place: tuple[str, ...] = IN_PLACE_ONLY  # the collective's own call, as c10d's

    @property
    def path(self) -> PathSpec:
        return PathSpec(memory=self.memory, communicator=self.communicator)

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return own


NCCL_UBR = register(NcclBuffers(
    name="nccl-ubr", summary="NCCL user-buffer registration: buffers from NCCL's allocator, registered",
    collectives=REGISTERED_COLLECTIVES, memory="nccl-registered",
    needs=Needs(features=("nccl-mem-pool",), min_nccl=(2, 19)), evidence=REGISTRATION))

NCCL_SYMM = register(NcclBuffers(
    name="nccl-symm", summary="NCCL symmetric windows: torch's symmetric memory on NCCL, NCCL's symmetric "
                              "kernels",
    collectives=("all_reduce", "reduce_scatter_base", "all_gather_base"), memory="nccl-window",
    needs=Needs(features=("nccl-window",), min_nccl=(2, 27)),
    evidence=Evidence(proof=r"ncclSymkDevKernel", fallback=r"ncclDevKernel_",
                      proof_text="NCCL's symmetric kernels (ncclSymkDevKernel_*)", nccl_log="symmetric",
                      judged_alone=False),
    expected_fallback=symmetric_kernel_fallback))

CTA_EFFICIENCY = register(NcclBuffers(
    name="cta-efficiency", summary="NCCL_CTA_POLICY_EFFICIENCY on a communicator of its own, buffers "
                                   "registered",
    collectives=REGISTERED_COLLECTIVES, memory="nccl-registered", communicator="cta-efficiency",
    needs=Needs(features=("nccl-cta-policy", "nccl-mem-pool"), min_nccl=(2, 27)), evidence=REGISTRATION))

CTA_ZERO = register(NcclBuffers(
    name="cta-zero", summary="NCCL_CTA_POLICY_ZERO: copy-engine all-gather and all-to-all, buffers in "
                             "windows",
    collectives=("all_gather_base", "all_to_all_single"),
    memory="nccl-window", communicator="cta-zero",
    needs=Needs(features=("nccl-cta-policy", "nccl-window"), min_nccl=(2, 28)),
    evidence=Evidence(proof=r"^Memcpy", fallback=r"ncclDevKernel|ncclSymkDevKernel",
                      proof_text="copy-engine copies (Memcpy) and no NCCL kernel", nccl_log="copy-engine",
                      judged_alone=False)))
