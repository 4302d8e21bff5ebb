"""The ways an op runs besides torch.distributed's own call, as commbench.measure.impls asks for them
(core/paths.PathSpec): a communicator of its own (an NCCL CTA policy, torchcomms), buffers in NCCL's
registered pool, in NCCL windows, in torch's symmetric memory or NVSHMEM, and the kernels that use them.

Each kind a PathSpec names is one object here, chosen once when the path starts: a communicator kind
(COMMUNICATOR_KINDS) makes what the ops run on; a memory kind (MEMORY_KINDS, a SizeScope subclass) sets
up once per run (``check``, then ``prepare``) and, per size, allocates, registers and releases the
buffers.

Invariants: every rank makes the same calls in the same order (communicators and rendezvous are
collective); set-up runs in steps, those a rank takes alone (``check``: options, torch's
symmetric-memory backend) before the collective ones (``start``, ``prepare``), and the ranks agree after
each, so no rank enters a collective that another could not reach; a set-up that fails closes what it
made and raises the first rank's reason on every rank. Nothing is left registered: ``SizeScope.release``
undoes a size's registration and drops its pool, ``PathState.close`` the communicators. Which torch calls
these are, and the versions they came in: docs/implementations.md.
"""

import contextlib
import itertools
from collections.abc import Callable, MutableMapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from commbench.coordination import communicator_timeout
from commbench.core.devices import accepted_options
from commbench.core.paths import SYMMETRIC_BACKENDS, PathSpec
from commbench.errors import brief

Agree = Callable[[str | None], str | None]  # this rank's failure (None: none) -> the first any rank had


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
               agree: Callable[[list[float]], list[list[float]]], timeout_s: float | None,
               agree_on: Agree) -> PathState:
    """Set up ``spec`` on every rank, step by step (see the module's invariants); raises with the first
    rank's reason, on every rank, when a step failed anywhere."""
    communicator = _kind(COMMUNICATOR_KINDS, "communicator", spec.communicator)
    state = PathState(spec, group, device, agree)
    steps = (lambda: communicator.check(state), lambda: state.memory.check(state),
             lambda: communicator.start(state, members, timeout_s), lambda: state.memory.prepare(state))
    for step in steps:
        error = None
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - said on every rank below, then raised
            error = brief(exc)
        if (error := agree_on(error)) is not None:
            with contextlib.suppress(Exception):  # the reason to raise is the step's, not the closing's
                state.close()  # a communicator made before the failing step is not left behind
            raise RuntimeError(error)
    return state


def _kind(kinds: dict[str, Any], what: str, name: str) -> Any:
    if name not in kinds:
        raise ValueError(f"commbench's backend has no {what} kind {name!r} (it has {', '.join(kinds)})")
    return kinds[name]


# --- memory kinds: where a size's buffers live ---------------------------------------------------------

class SizeScope:
    """plain: one size's buffers from torch's allocator, nothing to register. Subclasses are the other
    memory kinds: where their buffers are allocated, their registration (timed by the caller, apart from
    the ops) and its undoing; ``check`` (this rank alone) and ``prepare`` (with the others) are their
    set-up once per run."""

    def __init__(self, state: PathState) -> None:
        self.state = state
        self.binding = Binding(state.group_name, state.comm)

    @classmethod
    def check(cls, state: PathState) -> None:
        return None

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
    """torch's symmetric memory on ``backend`` (one per process: chosen at set-up), each buffer from a
    pool of the size's own and rendezvoused over the group. torch's one pool per device
    (symm_mem.get_mem_pool, which symm_mem.empty allocates from) never returns its segments, so a sweep
    would keep about twice its largest size resident; the size's pool goes with the size."""

    kind = ""  # the memory kind's name (MEMORY_KINDS), which names its backend (core.paths)

    @classmethod
    def backend(cls) -> str:
        return SYMMETRIC_BACKENDS[cls.kind]

    @classmethod
    def check(cls, state: PathState) -> None:
        cls.choose_backend(state.device)

    @classmethod
    def choose_backend(cls, device: torch.device) -> None:
        """torch's symmetric-memory backend for this process: possible while its allocator is unused."""
        symm_mem, name = _symm_mem(), cls.backend()
        current = symm_mem.get_backend(device)
        if current == name:
            return
        try:
            symm_mem.set_backend(name)
        except RuntimeError as exc:  # torch allows one backend per process once its allocator was used
            raise RuntimeError(f"this process already uses torch's {current} symmetric memory; {name} "
                               f"needs rank processes of its own ({brief(exc)})") from None

    @classmethod
    def prepare(cls, state: PathState) -> None:
        _warm(state.group, state.device)  # NCCL windows need the communicator made before the rendezvous

    def __init__(self, state: PathState) -> None:
        super().__init__(state)
        self.pool: Any = symmetric_pool(state.device)

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        with torch.cuda.use_mem_pool(self.pool):
            return torch.empty(count, dtype=dtype, device=device)

    def register(self, tensors: list[torch.Tensor], input_splits: list[int] | None) -> Binding:
        for tensor in _distinct_storages(tensors):
            _symm_mem().rendezvous(tensor, self.state.group_name)
        return self.binding

    def release(self) -> None:
        self.pool = None  # the size's buffers are gone: its segments go back to the device


def symmetric_pool(device: torch.device) -> Any:
    """A pool of torch's symmetric memory (the backend's allocator) with the options torch gives its own
    (use_on_oom=False: no symmetric space lent to other allocations; no_split: a segment per tensor, one
    signal pad each). A torch whose MemPool takes neither gets its own pool, and keeps what it holds."""
    symm_mem = _symm_mem()
    options = accepted_options(torch.cuda.MemPool, {"use_on_oom": False, "no_split": True})
    if "no_split" not in options:
        return symm_mem.get_mem_pool(device)
    return torch.cuda.MemPool(symm_mem.get_mempool_allocator(device), **options)


class NcclWindows(SymmetricMemory):
    """nccl-window: torch's symmetric memory on NCCL; the rendezvous makes the buffers NCCL windows
    (ncclCommWindowRegister)."""

    kind = "nccl-window"


class SymmetricHeap(SymmetricMemory):
    """symmetric: torch's own symmetric memory (CUDA backend)."""

    kind = "symmetric"

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        # every rank must allocate the same size: uneven buffers take the largest rank's count
        agreed = int(max(values[0] for values in self.state.agree([float(count)])))
        return super().allocate(max(agreed, 1), dtype, device)[:count]


class MulticastHeap(SymmetricHeap):
    """multicast: torch's own symmetric memory, whose multicast torch itself confirms once its CUDA
    backend is this process's (the probe asked the driver, which does not read torch's settings such as
    TORCH_SYMM_MEM_DISABLE_MULTICAST)."""

    kind = "multicast"

    @classmethod
    def check(cls, state: PathState) -> None:
        super().check(state)
        from torch._C._autograd import DeviceType
        from torch._C._distributed_c10d import _SymmetricMemory

        index = state.device.index if state.device.index is not None else torch.cuda.current_device()
        if not _SymmetricMemory.has_multicast_support(DeviceType.CUDA, index):
            raise RuntimeError(f"torch's CUDA symmetric memory has no multicast on cuda:{index}")


class NvshmemHeap(SymmetricHeap):
    """nvshmem: torch's symmetric memory on NVSHMEM, and all_to_all_vdev's splits on the device. NVSHMEM's
    heap is fixed when it starts (NVSHMEM_SYMMETRIC_SIZE): a size that does not fit fails to allocate,
    and says so."""

    kind = "nvshmem"

    @classmethod
    def check(cls, state: PathState) -> None:
        super().check(state)
        state.vdev_arguments = len(torch.ops.symm_mem.all_to_all_vdev.default._schema.arguments)
        if state.vdev_arguments not in (4, 5):
            raise RuntimeError(f"torch {torch.__version__}'s all_to_all_vdev takes "
                               f"{state.vdev_arguments} arguments, a form commbench does not know")

    def allocate(self, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        try:
            return super().allocate(count, dtype, device)
        except RuntimeError as exc:
            raise RuntimeError(f"{brief(exc)} (NVSHMEM's symmetric heap is fixed at start: "
                               "NVSHMEM_SYMMETRIC_SIZE sets it)") from None

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
        with torch.cuda.use_mem_pool(self.pool):
            if self.state.vdev_arguments == 4:
                binding.in_splits = torch.zeros((3, ranks), dtype=torch.int64, device=device)
                binding.in_splits[0].copy_(splits)
                symm_mem.rendezvous(binding.in_splits, self.state.group_name)
                return
            binding.in_splits = torch.empty(ranks, dtype=torch.int64, device=device).copy_(splits)
            binding.out_splits_offsets = torch.empty((2, ranks), dtype=torch.int64, device=device)
        for tensor in (binding.in_splits, binding.out_splits_offsets):
            symm_mem.rendezvous(tensor, self.state.group_name)

    def release(self) -> None:
        self.binding.in_splits = self.binding.out_splits_offsets = None  # before the pool they live in
        super().release()


MEMORY_KINDS: dict[str, type[SizeScope]] = {
    "plain": SizeScope, "nccl-registered": RegisteredPool, "nccl-window": NcclWindows,
    "symmetric": SymmetricHeap, "multicast": MulticastHeap, "nvshmem": NvshmemHeap}
assert all(MEMORY_KINDS[kind].kind == kind for kind in SYMMETRIC_BACKENDS), "a symmetric kind names itself"


def _distinct_storages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    found = []
    for tensor in tensors:
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in seen:
            seen.add(pointer)
            found.append(tensor)
    return found


def _warm(group: Any, device: torch.device) -> None:
    probe = torch.zeros(1, device=device)
    dist.all_reduce(probe, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- communicator kinds: what runs the ops -------------------------------------------------------------

class RunCommunicator:
    """run: the run's own communicator (or sub-communicator), nothing to make."""

    def check(self, state: PathState) -> None:
        return None

    def start(self, state: PathState, members: list[list[int]], timeout_s: float | None) -> None:
        return None


def own_timeout(backend: str, timeout_s: float | None) -> dict[str, timedelta]:
    """The timeout of a communicator an implementation makes: the run's own groups' (--timeout, and for
    NCCL the watchdog's margin beyond it: coordination.communicator_timeout)."""
    return {} if timeout_s is None else {"timeout": communicator_timeout(backend, timeout_s)}


class CtaPolicyCommunicator(RunCommunicator):
    """A communicator per group, made with an NCCL CTA policy (``policy``: the ProcessGroupNCCL
    attribute), by every rank in the same order; then one op on it, so its creation is part of the
    set-up and not of the first timed op."""

    def __init__(self, policy: str) -> None:
        self.policy = policy

    def options(self) -> Any:
        options = dist.ProcessGroupNCCL.Options()
        options.config.cta_policy = getattr(dist.ProcessGroupNCCL, self.policy)
        return options

    def check(self, state: PathState) -> None:
        self.options()

    def start(self, state: PathState, members: list[list[int]], timeout_s: float | None) -> None:
        mine = None
        for ranks in members:
            made = dist.new_group(list(ranks), backend="nccl", pg_options=self.options(),
                                  **own_timeout("nccl", timeout_s))
            if dist.get_rank() in ranks:
                mine = made
                state.owned.append(made)
        _warm(mine, state.device)
        state.group = mine


TORCHCOMM_VARIABLES = ("TORCHCOMM_RANK", "TORCHCOMM_SIZE")  # what torchcomms reads its place from first


def torchcomms_place(environ: MutableMapping[str, str], rank: int, world_size: int) -> None:
    """Set in ``environ`` (the rank's, by running/rank.py) where torchcomms finds its rank and size: it
    reads these, then only torchrun's, Open MPI's, MPICH's and PALS' variables (TorchCommUtils.cpp,
    query_ranksize), so under srun, flux, PMIx or MVAPICH it could not start otherwise."""
    environ.update(zip(TORCHCOMM_VARIABLES, (str(rank), str(world_size)), strict=True))


class TorchcommsCommunicator(RunCommunicator):
    """torchcomms: a communicator of its own (torchcomms.new_comm) over the run's rendezvous store, on
    NCCL with CUDA or gloo on CPU; the ops keep the run's group for nothing but its name.

    Every start makes a new one (a sweep file's benchmarks, --repeat's passes): its name and its keys in
    the store are the start's own, so it never reads an earlier communicator's unique id. torchcomms
    finds its rank and size in variables of its own, which each rank sets from the process group
    (``torchcomms_place``), whatever started the ranks."""

    def __init__(self) -> None:
        self.starts = itertools.count()  # every rank starts the same communicators in the same order

    def check(self, state: PathState) -> None:
        import torchcomms  # noqa: F401 - a rank without it fails here, before the collective step

    def start(self, state: PathState, members: list[list[int]], timeout_s: float | None) -> None:
        import torchcomms

        if len(members) != 1:
            raise RuntimeError("commbench runs torchcomms over the whole world only, not in sub-groups")
        from torch.distributed import distributed_c10d as c10d

        name, prefix = torchcomms_identity(next(self.starts))
        backend = "nccl" if state.device.type == "cuda" else "gloo"
        store = dist.PrefixStore(prefix, c10d._get_default_store())
        state.comm = torchcomms.new_comm(backend, state.device, name, store=store,
                                         **own_timeout(backend, timeout_s))


def torchcomms_identity(start: int) -> tuple[str, str]:
    """The name and the store prefix of this process's ``start``-th torchcomms communicator."""
    return f"commbench-{start}", f"commbench-torchcomms/{start}/"


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
    if collective == "all_reduce":  # in place: out of place, the backend copied the input first
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
