"""c10d: torch.distributed's own call on the run's communicator, with buffers from torch's allocator:
what commbench measured before --impl, and the default."""

from commbench.measure.impls.base import Implementation, Needs, register

C10D = register(Implementation(
    name="c10d", summary="torch.distributed's own call on the run's communicator (the default)",
    collectives=None, needs=Needs(backend="", device="")))
