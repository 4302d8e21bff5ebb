"""torchcomms: the collective through a torchcomms communicator of its own (torchcomms.new_comm), made
over the run's rendezvous store, on NCCL with CUDA or gloo on CPU; when the package is installed."""

from dataclasses import dataclass

from commbench.core.paths import PathSpec
from commbench.measure.impls.base import ANY, Implementation, Issue, Needs, register

COLLECTIVES = ("all_reduce", "all_gather_base", "reduce_scatter_base", "all_to_all_single", "broadcast")


@dataclass(frozen=True, kw_only=True)
class TorchcommsCall(Implementation):
    """Each collective by torchcomms' call of the same name, on a communicator of its own."""

    @property
    def path(self) -> PathSpec:
        return PathSpec(communicator="torchcomms")

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return lambda backend, args: backend.torchcomms_op(args, collective)


TORCHCOMMS = register(TorchcommsCall(
    name="torchcomms", summary="a torchcomms communicator (torchcomms.new_comm) instead of c10d's",
    collectives=COLLECTIVES,
    needs=Needs(backend="", device="", features=("torchcomms",), whole_world=True,
                ops={ANY: ("sum", "avg", "min", "max", "prod")}),
    copies_out_of_place=("all_reduce",)))  # torchcomms' all_reduce works in place too
