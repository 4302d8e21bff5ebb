"""The ways an op runs besides torch.distributed's own call, as commbench.measure.impls asks for them
(core/paths.PathSpec): a communicator of its own (an NCCL CTA policy, torchcomms), buffers in NCCL's
registered pool, in NCCL windows, in torch's symmetric memory or NVSHMEM, and the kernels that use them.

Each kind a PathSpec names is one object here, chosen once when the path starts: a communicator kind
(COMMUNICATOR_KINDS) makes what the ops run on; a memory kind (MEMORY_KINDS, a SizeScope subclass) sets
up once per run (``prepare``) and, per size, allocates, registers and releases the buffers.

Invariants: every rank makes the same calls in the same order (communicators and rendezvous are
collective); set-up raises with the reason when this process cannot, and nothing is left registered:
``SizeScope.release`` undoes a size's registration, ``PathState.close`` the communicators. Which torch
calls these are, and the versions they came in: docs/implementations.md.
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from commbench.core.paths import PathSpec


def _symm_mem() -> Any:
    import torch.distributed._symmetric_memory as symm_mem

    return symm_mem


class Binding:
    """One size's buffers as the implementation's ops need them: the group name symmetric kernels take,
    and NVSHMEM's device-side splits."""

    def __init__(self, group_name: str, comm: Any = None) -> None:
        self.group_name = group_name
        self.comm = comm  # torchcomms' communicator
        self.in_splits: Any = None
        self.out_splits_offsets: Any = None


class PathState:
    """One implementation's set-up in this process, made once per run: its communicator (the run's, or
    one of its own), its memory kind, torchcomms' communicator."""

    def __init__(self, spec: PathSpec, group: Any, device: torch.device,
                 agree: Callable[[list[float]], list[list[float]]]) -> None:
        self.memory = _kind(MEMORY_KINDS, "memory", spec.memory)
        self.group = group  # what CollectiveArgs carry: the run's group, or the CTA policy's
        self.device = device
        self.agree = agree
        self.owned: list[Any] = []
        self.comm: Any = None
        self.vdev_arguments = 0

    @property
    def group_name(self) -> str:
        return (self.group or dist.group.WORLD).group_name

    def nccl_backend(self) -> Any:
        return (self.group or dist.group.WORLD)._get_backend(self.device)

    def size_scope(self) -> "SizeScope":
        return self.memory(self)

    def close(self) -> None:
        if self.comm is not None:
            self.comm.finalize()
            self.comm = None
        for group in self.owned:
            dist.destroy_process_group(group)
        self.owned = []


def start_path(spec: PathSpec, group: Any, members: list[list[int]], device: torch.device,
               agree: Callable[[list[float]], list[list[float]]], timeout_s: float | None) -> PathState:
    """Set up ``spec`` on every rank (the communicator first, then the memory kind); raises with the
    reason when this process cannot."""
    communicator = _kind(COMMUNICATOR_KINDS, "communicator", spec.communicator)
    state = PathState(spec, group, device, agree)
    communicator.start(state, members, timeout_s)
    state.memory.prepare(state)
    return state


def _kind(kinds: dict[str, Any], what: str, name: str) -> Any:
    if name not in kinds:
        raise ValueError(f"commbench's backend has no {what} kind {name!r} (it has {', '.join(kinds)})")
    return kinds[name]


# --- memory kinds: where a size's buffers live ---------------------------------------------------------

class SizeScope:
    """plain: one size's buffers from torch's allocator, nothing to register. Subclasses are the other
    memory kinds: where their buffers are allocated, their registration (timed by the caller, apart from
    the ops) and its undoing; ``prepare`` is their set-up once per run."""

    def __init__(self, state: PathState) -> None:
        self.state = state
        self.binding = Binding(state.group_name, state.comm)

    @classmethod
    def prepare(cls, state: PathState) -> None:
        return None

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(count, dtype=dtype, device=device)

    def register(self, tensors: list[torch.Tensor], input_splits: list[int] | None) -> Binding:
        return self.binding

    def release(self) -> None:
        return None


class RegisteredPool(SizeScope):
    """nccl-registered: a torch.cuda.MemPool over NCCL's allocator, registered with the communicator for
    the size (register_mem_pool: ncclCommRegister) and deregistered after it."""

    def __init__(self, state: PathState) -> None:
        super().__init__(state)
        self.pool: Any = torch.cuda.MemPool(state.nccl_backend().mem_allocator)
        self.registered_pool = False

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        with torch.cuda.use_mem_pool(self.pool):
            return torch.empty(count, dtype=dtype, device=device)

    def register(self, tensors: list[torch.Tensor], input_splits: list[int] | None) -> Binding:
        self.state.nccl_backend().register_mem_pool(self.pool)
        self.registered_pool = True
        return self.binding

    def release(self) -> None:
        if self.registered_pool:
            self.state.nccl_backend().deregister_mem_pool(self.pool)
            self.registered_pool = False
        self.pool = None


class SymmetricMemory(SizeScope):
    """torch's symmetric memory on ``backend`` (one per process: chosen at set-up), each buffer
    rendezvoused over the group for the size."""

    backend = ""

    @classmethod
    def prepare(cls, state: PathState) -> None:
        _choose_symmetric_backend(cls.backend, state.device)
        _warm(state.group, state.device)  # NCCL windows need the communicator made before the rendezvous

    def register(self, tensors: list[torch.Tensor], input_splits: list[int] | None) -> Binding:
        for tensor in _distinct_storages(tensors):
            _symm_mem().rendezvous(tensor, self.state.group_name)
        return self.binding


class NcclWindows(SymmetricMemory):
    """nccl-window: torch's symmetric memory on NCCL, buffers from its pool; the rendezvous makes them
    NCCL windows (ncclCommWindowRegister)."""

    backend = "NCCL"

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        with torch.cuda.use_mem_pool(_symm_mem().get_mem_pool(device)):
            return torch.empty(count, dtype=dtype, device=device)


class SymmetricHeap(SymmetricMemory):
    """symmetric: torch's own symmetric memory (CUDA backend), buffers from symm_mem.empty."""

    backend = "CUDA"

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        # every rank must allocate the same size: uneven buffers take the largest rank's count
        agreed = int(max(values[0] for values in self.state.agree([float(count)])))
        return _symm_mem().empty(max(agreed, 1), dtype=dtype, device=device)[:count]


class NvshmemHeap(SymmetricHeap):
    """nvshmem: torch's symmetric memory on NVSHMEM, and all_to_all_vdev's splits on the device."""

    backend = "NVSHMEM"

    @classmethod
    def prepare(cls, state: PathState) -> None:
        super().prepare(state)
        state.vdev_arguments = len(torch.ops.symm_mem.all_to_all_vdev.default._schema.arguments)
        if state.vdev_arguments not in (4, 5):
            raise RuntimeError(f"torch {torch.__version__}'s all_to_all_vdev takes "
                               f"{state.vdev_arguments} arguments, a form commbench does not know")

    def register(self, tensors: list[torch.Tensor], input_splits: list[int] | None) -> Binding:
        super().register(tensors, input_splits)
        self._device_splits(tensors[0].device, input_splits)
        return self.binding

    def _device_splits(self, device: torch.device, input_splits: list[int] | None) -> None:
        """all_to_all_vdev's splits on the device, in symmetric memory: this rank's sends, and where
        the op writes what it received (newer torch: a (2, n) tensor; torch 2.8: one (3, n) tensor)."""
        symm_mem = _symm_mem()
        ranks = len(input_splits or []) or 1
        splits = torch.tensor(input_splits or [0], dtype=torch.int64)
        binding = self.binding
        if self.state.vdev_arguments == 4:
            binding.in_splits = symm_mem.empty((3, ranks), dtype=torch.int64, device=device)
            binding.in_splits[0].copy_(splits)
            symm_mem.rendezvous(binding.in_splits, self.state.group_name)
            return
        binding.in_splits = symm_mem.empty(ranks, dtype=torch.int64, device=device).copy_(splits)
        binding.out_splits_offsets = symm_mem.empty((2, ranks), dtype=torch.int64, device=device)
        for tensor in (binding.in_splits, binding.out_splits_offsets):
            symm_mem.rendezvous(tensor, self.state.group_name)


MEMORY_KINDS: dict[str, type[SizeScope]] = {
    "plain": SizeScope, "nccl-registered": RegisteredPool, "nccl-window": NcclWindows,
    "symmetric": SymmetricHeap, "nvshmem": NvshmemHeap}


def _distinct_storages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    found = []
    for tensor in tensors:
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in seen:
            seen.add(pointer)
            found.append(tensor)
    return found


def _choose_symmetric_backend(name: str, device: torch.device) -> None:
    symm_mem = _symm_mem()
    current = symm_mem.get_backend(device)
    if current == name:
        return
    try:
        symm_mem.set_backend(name)
    except RuntimeError as exc:  # torch allows one backend per process once memory was allocated
        raise RuntimeError(f"this process already uses torch's {current} symmetric memory; {name} needs "
                           f"a run of its own ({exc})") from None


def _warm(group: Any, device: torch.device) -> None:
    probe = torch.zeros(1, device=device)
    dist.all_reduce(probe, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- communicator kinds: what runs the ops -------------------------------------------------------------

class RunCommunicator:
    """run: the run's own communicator (or sub-communicator), nothing to make."""

    def start(self, state: PathState, members: list[list[int]], timeout_s: float | None) -> None:
        return None


class CtaPolicyCommunicator:
    """A communicator per group, made with an NCCL CTA policy (``policy``: the ProcessGroupNCCL
    attribute), by every rank in the same order; then one op on it, so its creation is part of the
    set-up and not of the first timed op."""

    def __init__(self, policy: str) -> None:
        self.policy = policy

    def start(self, state: PathState, members: list[list[int]], timeout_s: float | None) -> None:
        options = dist.ProcessGroupNCCL.Options()
        options.config.cta_policy = getattr(dist.ProcessGroupNCCL, self.policy)
        extra = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
        mine = None
        for ranks in members:
            made = dist.new_group(list(ranks), backend="nccl", pg_options=options, **extra)
            if dist.get_rank() in ranks:
                mine = made
                state.owned.append(made)
        _warm(mine, state.device)
        state.group = mine


class TorchcommsCommunicator:
    """torchcomms: a communicator of its own (torchcomms.new_comm) over the run's rendezvous store, on
    NCCL with CUDA or gloo on CPU; the ops keep the run's group for nothing but its name."""

    def start(self, state: PathState, members: list[list[int]], timeout_s: float | None) -> None:
        import torchcomms

        if len(members) != 1:
            raise RuntimeError("commbench runs torchcomms over the whole world only, not in sub-groups")
        from torch.distributed import distributed_c10d as c10d

        store = dist.PrefixStore("commbench-torchcomms/", c10d._get_default_store())
        options: dict[str, Any] = {"store": store}
        if timeout_s is not None:
            options["timeout"] = timedelta(seconds=timeout_s)
        device = state.device
        state.comm = torchcomms.new_comm("nccl" if device.type == "cuda" else "gloo", device, "commbench",
                                         **options)


COMMUNICATOR_KINDS = {
    "run": RunCommunicator(), "cta-efficiency": CtaPolicyCommunicator("NCCL_CTA_POLICY_EFFICIENCY"),
    "cta-zero": CtaPolicyCommunicator("NCCL_CTA_POLICY_ZERO"), "torchcomms": TorchcommsCommunicator()}


# --- the kernels ------------------------------------------------------------------------------------

def one_shot_all_reduce(args: Any) -> None:
    """torch's one-shot all-reduce (out of place only: the implementations' probes refuse the rest, as
    they refuse other dtypes than float32 and bfloat16, and other ops than sum)."""
    torch.ops.symm_mem.one_shot_all_reduce_out(args.input, "sum", args.path.group_name, args.output)


def two_shot_all_reduce(args: Any) -> None:
    ops, name = torch.ops.symm_mem, args.path.group_name
    if args.input is args.output:
        ops.two_shot_all_reduce_(args.output, "sum", name)
    else:
        ops.two_shot_all_reduce_out(args.input, "sum", name, args.output)


def multimem_all_reduce(args: Any) -> None:
    ops, name = torch.ops.symm_mem, args.path.group_name
    if args.input is args.output:
        ops.multimem_all_reduce_(args.output, "sum", name)
    else:
        ops.multimem_one_shot_all_reduce_out(args.input, "sum", name, args.output)


def symmetric_reduce_scatter(args: Any) -> None:
    torch.ops.symm_mem.reduce_scatter_out(args.input, args.path.group_name, False, args.output)


def multimem_all_gather(args: Any) -> None:
    torch.ops.symm_mem.multimem_all_gather_out(args.input, args.path.group_name, args.output)


def all_to_all_vdev(args: Any) -> None:
    binding = args.path
    if binding.out_splits_offsets is None:  # torch 2.8's form: one (3, n) splits tensor
        torch.ops.symm_mem.all_to_all_vdev(args.input, args.output, binding.in_splits, binding.group_name)
        return
    torch.ops.symm_mem.all_to_all_vdev(args.input, args.output, binding.in_splits,
                                       binding.out_splits_offsets, binding.group_name)


def torchcomms_call(args: Any, collective: str) -> Any:
    """The torchcomms call for a commbench collective; returns its work handle."""
    import torchcomms

    comm = args.path.comm
    op = getattr(torchcomms.ReduceOp, {"prod": "PRODUCT"}.get(args.op, args.op.upper()))
    if collective == "all_reduce":
        if args.input is not args.output:
            args.output.copy_(args.input)
        return comm.all_reduce(args.output, op, True)
    if collective == "all_gather_base":
        return comm.all_gather_single(args.output, args.input, True)
    if collective == "reduce_scatter_base":
        return comm.reduce_scatter_single(args.output, args.input, op, True)
    if collective == "all_to_all_single":
        return comm.all_to_all_single(args.output, args.input, True)
    if collective == "broadcast":
        return comm.broadcast(args.output, args.root, True)
    raise ValueError(f"commbench runs no {collective} through torchcomms")
