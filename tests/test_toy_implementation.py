"""Adding an implementation is a class and a registration in one place (docs/architecture.md): a toy one,
with a memory kind of its own registered in the backend's registry, runs through the real sweep beside
c10d on real gloo ranks, its set-up and registration timed apart, every size's registration undone, and
the two side by side against the registry's reference."""

from dataclasses import dataclass

import pytest
import torch

from commbench.backends.paths import MEMORY_KINDS, SizeScope
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.core.paths import PathSpec
from commbench.measure.impls.base import Implementation, Issue, Needs, register
from commbench.running.runner import run_sweep
from commbench.writers.output import NullOutput
from commbench.writers.side_by_side import side_by_side_table
from tests.dist_helpers import run_ranks

pytestmark = pytest.mark.processes

EVENTS: list[str] = []  # what the toy memory kind did, in order, in this rank's process


class LoggedMemory(SizeScope):
    """torch's allocator, each step written down: what the runner asked of a memory kind, and when."""

    @classmethod
    def prepare(cls, state) -> None:
        EVENTS.append("prepare")

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        EVENTS.append(f"allocate {count}")
        return super().allocate(count, dtype, device)

    def register(self, tensors, input_splits):
        EVENTS.append(f"register {len(tensors)}")
        return super().register(tensors, input_splits)

    def release(self) -> None:
        EVENTS.append("release")


# The whole of a new implementation: what the backend sets up for it, and how it issues.
@dataclass(frozen=True, kw_only=True)
class LoggedBuffers(Implementation):
    @property
    def path(self) -> PathSpec:
        return PathSpec(memory="logged")

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return own


TOY = LoggedBuffers(name="logged", summary="the collective's own call on buffers whose every step is logged",
                    collectives=("all_reduce",), needs=Needs(backend="gloo", device="cpu"))


class ProbeCounting(TorchDistBackend):
    """The real backend, counting how often the implementations' probe runs."""

    probes = 0

    def capabilities(self):
        ProbeCounting.probes += 1
        return super().capabilities()


class Collected(NullOutput):
    def __init__(self) -> None:
        self.compared: list = []

    def implementations_done(self, rows) -> None:
        self.compared.append(rows)


def _sweep(impls: list[str], backend: TorchDistBackend) -> tuple[list, Collected]:
    config = resolve(run_config(collectives=["all_reduce"], sizes=[1024, 4096], iters=3, warmup=1, check=True,
                                impls=impls, backend="gloo", device="cpu"))
    output = Collected()
    return run_sweep(config, backend, output), output


def _toy_beside_c10d(rank: int, world_size: int) -> dict:
    MEMORY_KINDS["logged"] = LoggedMemory  # in this rank's process only, as is the registration below
    register(TOY)
    backend = ProbeCounting("gloo", torch.device("cpu"))
    _sweep(["c10d"], backend)
    probes_for_c10d = ProbeCounting.probes
    rows, output = _sweep(["c10d", "logged"], backend)
    (compared,) = output.compared
    return {"probes": (probes_for_c10d, ProbeCounting.probes), "events": list(EVENTS),
            "rows": [(row.impl, row.size_bytes, row.impl_status, row.impl_init_ms is not None,
                      row.impl_register_ms is not None, row.wrong, row.error) for row in rows],
            "side_by_side": side_by_side_table(compared).columns if rank == 0 else None}


def test_a_registered_toy_implementation_runs_beside_c10d_through_the_sweep():
    first, second = run_ranks(_toy_beside_c10d, 2)
    assert first["probes"] == second["probes"] == (0, 1)  # c10d needs nothing of the process: no probe
    plain, timed = ("", False, False, 0, ""), ("ran", True, True, 0, "")  # status, set-up timed, wrong, error
    assert first["rows"] == [("c10d", 1024, *plain), ("c10d", 4096, *plain),
                             ("logged", 1024, *timed), ("logged", 4096, *timed)]
    # set up once; per size its buffer (all_reduce in place: one) allocated, registered, then released
    assert first["events"] == ["prepare", "allocate 256", "register 1", "release",
                               "allocate 1024", "register 1", "release"]
    assert first["side_by_side"] == ["size", "c10d µs", "logged µs", "fastest", "logged vs c10d"]
