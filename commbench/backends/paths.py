"""The ways an op runs besides torch.distributed's own call, as commbench.measure.impls asks for them
(core/paths.PathSpec): a communicator of its own (an NCCL CTA policy, torchcomms), buffers in NCCL's
registered pool, in NCCL windows, in torch's symmetric memory or NVSHMEM, and the kernels that use them.

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

SYMMETRIC_BACKENDS = {"nccl-window": "NCCL", "symmetric": "CUDA", "nvshmem": "NVSHMEM"}
CTA_POLICIES = {"efficiency": "NCCL_CTA_POLICY_EFFICIENCY", "zero": "NCCL_CTA_POLICY_ZERO"}


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


class SizeScope:
    """One size under an implementation: where its buffers are allocated, their registration (timed by
    the caller, apart from the ops) and its undoing."""

    def __init__(self, state: "PathState") -> None:
        self.state = state
        self.pool: Any = None
        self.registered_pool = False
        spec = state.spec
        if spec.memory == "nccl-registered":
            self.pool = torch.cuda.MemPool(state.nccl_backend().mem_allocator)
        self.binding = Binding(state.group_name, state.comm)

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        memory = self.state.spec.memory
        if memory == "nccl-registered":
            with torch.cuda.use_mem_pool(self.pool):
                return torch.empty(count, dtype=dtype, device=device)
        if memory == "nccl-window":
            with torch.cuda.use_mem_pool(_symm_mem().get_mem_pool(device)):
                return torch.empty(count, dtype=dtype, device=device)
        if memory in ("symmetric", "nvshmem"):
            # every rank must allocate the same size: uneven buffers take the largest rank's count
            agreed = int(max(values[0] for values in self.state.agree([float(count)])))
            return _symm_mem().empty(max(agreed, 1), dtype=dtype, device=device)[:count]
        return torch.empty(count, dtype=dtype, device=device)

    def register(self, tensors: list[torch.Tensor], input_splits: list[int] | None) -> Binding:
        memory = self.state.spec.memory
        if memory == "nccl-registered":
            self.state.nccl_backend().register_mem_pool(self.pool)
            self.registered_pool = True
        elif memory in SYMMETRIC_BACKENDS:
            for tensor in _distinct_storages(tensors):
                _symm_mem().rendezvous(tensor, self.state.group_name)
        if memory == "nvshmem":
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

    def release(self) -> None:
        if self.registered_pool:
            self.state.nccl_backend().deregister_mem_pool(self.pool)
            self.registered_pool = False
        self.pool = None


def _distinct_storages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    found = []
    for tensor in tensors:
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in seen:
            seen.add(pointer)
            found.append(tensor)
    return found


class PathState:
    """One implementation's set-up in this process, made once per run: its communicator (the run's, or
    one of its own), the symmetric-memory backend it chose, torchcomms' communicator."""

    def __init__(self, spec: PathSpec, group: Any, device: torch.device,
                 agree: Callable[[list[float]], list[list[float]]]) -> None:
        self.spec = spec
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

    def size_scope(self) -> SizeScope:
        return SizeScope(self)

    def close(self) -> None:
        if self.comm is not None:
            self.comm.finalize()
            self.comm = None
        for group in self.owned:
            dist.destroy_process_group(group)
        self.owned = []


def start_path(spec: PathSpec, group: Any, members: list[list[int]], device: torch.device,
               agree: Callable[[list[float]], list[list[float]]], timeout_s: float | None) -> PathState:
    """Set up ``spec`` on every rank (communicators first, then the memory backend); raises with the
    reason when this process cannot."""
    state = PathState(spec, group, device, agree)
    if spec.cta_policy:
        state.group = _cta_group(spec.cta_policy, members, device, timeout_s, state.owned)
    if spec.memory in SYMMETRIC_BACKENDS:
        _choose_symmetric_backend(SYMMETRIC_BACKENDS[spec.memory], device)
        _warm(state.group, device)  # NCCL windows need the communicator made before the rendezvous
    if spec.memory == "nvshmem":
        state.vdev_arguments = len(torch.ops.symm_mem.all_to_all_vdev.default._schema.arguments)
        if state.vdev_arguments not in (4, 5):
            raise RuntimeError(f"torch {torch.__version__}'s all_to_all_vdev takes "
                               f"{state.vdev_arguments} arguments, a form commbench does not know")
    if spec.communicator == "torchcomms":
        state.comm = _torchcomm(device, members, timeout_s)
    return state


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


def _cta_group(policy: str, members: list[list[int]], device: torch.device, timeout_s: float | None,
               owned: list[Any]) -> Any:
    """A communicator per group, made with the CTA policy, by every rank in the same order; then one
    op on it, so its creation is part of the set-up and not of the first timed op."""
    options = dist.ProcessGroupNCCL.Options()
    options.config.cta_policy = getattr(dist.ProcessGroupNCCL, CTA_POLICIES[policy])
    extra = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
    mine = None
    for ranks in members:
        made = dist.new_group(list(ranks), backend="nccl", pg_options=options, **extra)
        if dist.get_rank() in ranks:
            mine = made
            owned.append(made)
    _warm(mine, device)
    return mine


def _warm(group: Any, device: torch.device) -> None:
    probe = torch.zeros(1, device=device)
    dist.all_reduce(probe, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _torchcomm(device: torch.device, members: list[list[int]], timeout_s: float | None) -> Any:
    import torchcomms

    if len(members) != 1:
        raise RuntimeError("commbench runs torchcomms over the whole world only, not in sub-groups")
    from torch.distributed import distributed_c10d as c10d

    store = dist.PrefixStore("commbench-torchcomms/", c10d._get_default_store())
    options: dict[str, Any] = {"store": store}
    if timeout_s is not None:
        options["timeout"] = timedelta(seconds=timeout_s)
    return torchcomms.new_comm("nccl" if device.type == "cuda" else "gloo", device, "commbench",
                               **options)


# --- the kernels ------------------------------------------------------------------------------------

def symmetric_all_reduce(args: Any, algorithm: str) -> None:
    """One all-reduce by torch's symmetric-memory kernel: sum only, float32 and bfloat16 (the
    implementations' probes refuse the rest before this is called)."""
    ops, name = torch.ops.symm_mem, args.path.group_name
    in_place = args.input is args.output
    if algorithm == "one_shot":
        ops.one_shot_all_reduce_out(args.input, "sum", name, args.output)
    elif algorithm == "two_shot" and in_place:
        ops.two_shot_all_reduce_(args.output, "sum", name)
    elif algorithm == "two_shot":
        ops.two_shot_all_reduce_out(args.input, "sum", name, args.output)
    elif in_place:
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
