"""Toy implementations whose memory kinds each need a process-wide backend of their own, as torch's
symmetric memory does (one backend per process, fixed once chosen), and one whose process dies on rank 1
as it sets up: importing this module registers them.
Imported on ranks only (and by the rank processes of a set, by name), never by the test session, whose
registry stays the product's."""

import os
from dataclasses import dataclass

import torch.distributed as dist

from commbench.backends.paths import MEMORY_KINDS, SizeScope
from commbench.core.paths import SYMMETRIC_BACKENDS, PathSpec
from commbench.measure.impls.base import Implementation, Issue, Needs, register

CHOSEN: list[str] = []  # this process's backend, once chosen (torch's allocator map holds one)


class ToyHeap(SizeScope):
    """torch's allocator for its buffers; at set-up it takes this process's backend, as
    symm_mem.set_backend does, refusing once another was taken."""

    backend = ""

    @classmethod
    def check(cls, state) -> None:
        if CHOSEN and CHOSEN[0] != cls.backend:
            raise RuntimeError("Backend can not be changed after use.")
        CHOSEN[:] = [cls.backend]


@dataclass(frozen=True, kw_only=True)
class ToyBuffers(Implementation):
    memory: str

    @property
    def path(self) -> PathSpec:
        return PathSpec(memory=self.memory)

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return own


for name in ("toy-a", "toy-b"):
    SYMMETRIC_BACKENDS[name] = name.upper()
    MEMORY_KINDS[name] = type(f"ToyHeap{name[-1].upper()}", (ToyHeap,), {"backend": name.upper()})
    register(ToyBuffers(name=name, summary=f"the collective's own call, buffers needing {name.upper()}",
                        collectives=("all_reduce",), needs=Needs(backend="gloo", device="cpu"), memory=name))


class DyingHeap(ToyHeap):
    backend = "TOY-DIES"

    @classmethod
    def check(cls, state) -> None:
        if dist.get_rank() == 1:
            os._exit(3)  # as a process killed by a device fault would end


SYMMETRIC_BACKENDS["toy-dies"] = "TOY-DIES"
MEMORY_KINDS["toy-dies"] = DyingHeap
register(ToyBuffers(name="toy-dies", summary="a process that dies on rank 1 as it sets up",
                    collectives=("all_reduce",), needs=Needs(backend="gloo", device="cpu"),
                    memory="toy-dies"))
