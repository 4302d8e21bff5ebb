"""torchcomms: the collective through a torchcomms communicator of its own (torchcomms.new_comm), made
over the run's rendezvous store, on NCCL with CUDA or gloo on CPU; when the package is installed."""

from commbench.core.paths import PathSpec
from commbench.measure.impls.base import ANY, Implementation, Needs, register

COLLECTIVES = ("all_reduce", "all_gather_base", "reduce_scatter_base", "all_to_all_single", "broadcast")


def _through(collective: str):  # an Issue
    return lambda backend, args: backend.torchcomms_op(args, collective)


TORCHCOMMS = register(Implementation(
    name="torchcomms", summary="a torchcomms communicator (torchcomms.new_comm) instead of c10d's",
    collectives=COLLECTIVES, path=PathSpec(communicator="torchcomms"),
    needs=Needs(backend="", device="", features=("torchcomms",), whole_world=True,
                ops={ANY: ("sum", "avg", "min", "max", "prod")}),
    issue={name: _through(name) for name in COLLECTIVES}))
