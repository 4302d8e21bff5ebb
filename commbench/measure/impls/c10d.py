"""c10d: torch.distributed's own call on the run's communicator, with buffers from torch's allocator:
what commbench measured before --impl, the default, and the reference the others are compared with."""

from dataclasses import dataclass

from commbench.core.paths import PathSpec
from commbench.measure.impls.base import Implementation, Issue, Needs, register

# torch.distributed's collectives that work in place only: out of place, the backend copies first
IN_PLACE_ONLY = ("all_reduce",)


@dataclass(frozen=True, kw_only=True)
class OwnCall(Implementation):
    """The collective's own call as the run set it up: nothing of its own to set up, register or judge."""

    @property
    def path(self) -> PathSpec | None:
        return None

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return own


C10D = register(OwnCall(
    name="c10d", summary="torch.distributed's own call on the run's communicator (the default)",
    collectives=None, needs=Needs(backend="", device=""), reference=True, copies_out_of_place=IN_PLACE_ONLY))
