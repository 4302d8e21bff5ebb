"""Bucketed reduce-scatter: many small gradients reduced by one collective, results handed to callbacks.

Each process group has a bucket of ``world_size x capacity`` elements; row r collects the chunks bound for
rank r. ``reduce_scatter(grad, callback)`` copies the padded gradient's n chunks into the bucket's rows
(dividing by the predivide factor on the way) unless the gradient would overflow it, in which case the
bucket is reduce-scattered first; a gradient whose chunk is larger than the whole bucket is reduced on its
own. ``flush()`` reduces whatever is queued. Every gradient's reduced chunk reaches its parameter through
its callback, once its collective is complete.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.patterns.schedule import Issuer, Label, Pending, Ring, dtype_name

FLAT, LIST = "reduce_scatter_base", "reduce_scatter"


@dataclass(frozen=True)
class BucketOptions:
    """How a bucketer groups and issues: ``capacity`` elements of each rank's chunk per bucket (0: every
    gradient on its own); ``depth`` buffers per bucket (collectives an asynchronous step keeps in
    flight); ``list_api``: the list reduce_scatter over views instead of the flat reduce_scatter_base;
    ``direct_numel``: room to divide the largest gradient reduced on its own (0: none is divided);
    ``reserved``: every flush is announced by reserve() with its exact fill, so none needs packing."""

    capacity: int
    depth: int = 1
    list_api: bool = False
    direct_numel: int = 0
    reserved: bool = False
    op: str = "sum"  # the reduce op: FSDP2 averages float32 and bfloat16 gradients


@dataclass
class BucketBuffers:
    data: torch.Tensor  # world_size x capacity: row r holds the chunks bound for rank r
    output: torch.Tensor  # capacity: this rank's reduced chunks
    staging: torch.Tensor | None  # a partly filled bucket's rows packed together for the flat API


class _Bucket:
    def __init__(self, ring: Ring[BucketBuffers], capacity: int) -> None:
        self.ring = ring
        self.capacity = capacity
        self.index, self.buffers = ring.take()
        self.stride = capacity  # elements per row; reserve() narrows it when the fill is known
        self.offset = 0  # elements per row queued so far
        self.callbacks: list[Callable[[], None]] = []

    def rows(self, world_size: int) -> torch.Tensor:
        return self.buffers.data[: world_size * self.stride].view(world_size, self.stride)

    def next_buffers(self) -> None:
        self.index, self.buffers = self.ring.take()
        self.stride, self.offset, self.callbacks = self.capacity, 0, []


def scaled_copy(destination: torch.Tensor, source: torch.Tensor, divisor: float) -> None:
    """destination = source / divisor in one pass (a plain copy when the divisor is 1)."""
    if divisor == 1:
        destination.copy_(source)
    else:
        torch.div(source, divisor, out=destination)


class ReduceScatterBucketer:
    """Queues gradients into a bucket per process group and reduce-scatters full buckets.

    ``capacity`` is the elements of each rank's chunk a bucket holds (0: every gradient is reduced on its
    own). ``depth`` buffers per bucket (and for gradients reduced directly) let an asynchronous step keep
    that many collectives in flight. ``list_api`` uses the list reduce_scatter over views of the rows
    instead of the flat reduce_scatter_base. ``reserved`` promises that every flush is announced by
    reserve() with its exact fill (per-unit grouping), so no flush needs a packing buffer.
    """

    def __init__(self, backend: Backend, world_size: int, dtype: torch.dtype, device: torch.device,
                 options: BucketOptions) -> None:
        self.backend = backend
        self.world_size = world_size
        self.capacity = options.capacity
        self.dtype = dtype
        self.device = device
        self.depth = depth = options.depth
        self.list_api = options.list_api
        self.reserved = options.reserved
        self.op = options.op
        self.issuer: Issuer | None = None  # set by the step for each run
        self._element_size = torch.empty((), dtype=dtype).element_size()
        self._direct_numel = direct_numel = options.direct_numel
        self._buckets: dict[Any, _Bucket] = {}
        # A gradient reduced on its own is divided into one of these first (unless predivide is 1).
        self._direct = Ring(backend, [self._zeros(direct_numel) for _ in range(depth)]) \
            if direct_numel else None
        self._undivided: list[Pending] = []  # direct collectives reading the gradient itself

    def _zeros(self, numel: int) -> torch.Tensor:
        return torch.zeros(numel, dtype=self.dtype, device=self.device)

    def _make_buffers(self) -> BucketBuffers:
        rows = self.world_size * self.capacity
        staging = None if self.list_api or self.reserved else self._zeros(rows)
        return BucketBuffers(self._zeros(rows), self._zeros(self.capacity), staging)

    def _bucket(self, group: Any) -> _Bucket:
        bucket = self._buckets.get(group)
        if bucket is None:
            ring = Ring(self.backend, [self._make_buffers() for _ in range(self.depth)])
            bucket = self._buckets[group] = _Bucket(ring, self.capacity)
        return bucket

    # --- queueing ---------------------------------------------------------------------------------
    def reduce_scatter(self, grad: torch.Tensor, callback: Callable[[torch.Tensor], None], *,
                       output: torch.Tensor, predivide: float, unit: str, group: Any = None) -> None:
        """Reduce-scatter ``grad`` (padded to world_size chunks); ``callback(result)`` gets this rank's
        reduced chunk. ``output`` receives it when the gradient is reduced on its own."""
        chunk = grad.numel() // self.world_size
        if chunk > self.capacity:
            self._reduce_directly(grad, callback, output, predivide, unit, group)
            return
        bucket = self._bucket(group)
        if bucket.offset + chunk > bucket.stride:
            self._flush(bucket, unit, "backward", group)
        start = bucket.offset
        scaled_copy(bucket.rows(self.world_size)[:, start:start + chunk], grad.view(self.world_size, chunk),
                    predivide)
        bucket.callbacks.append(partial(callback, bucket.buffers.output[start:start + chunk]))
        bucket.offset += chunk

    def reserve(self, chunk_elements: int, group: Any = None) -> None:
        """The next flush will hold exactly this many elements per rank: an empty bucket lays its rows out
        that wide, so the flush needs no packing copy."""
        bucket = self._bucket(group)
        if bucket.offset == 0 and chunk_elements <= self.capacity:
            bucket.stride = chunk_elements

    def flush(self, unit: str, phase: str, group: Any = None) -> None:
        bucket = self._buckets.get(group)
        if bucket is not None:
            self._flush(bucket, unit, phase, group)

    def flush_all(self, unit: str, phase: str) -> None:
        for group, bucket in self._buckets.items():
            self._flush(bucket, unit, phase, group)

    def complete_all(self) -> None:
        """Wait for every collective still in flight and run its callbacks."""
        for bucket in self._buckets.values():
            bucket.ring.complete_all()
        if self._direct is not None:
            self._direct.complete_all()
        waiting, self._undivided = self._undivided, []
        for pending in waiting:
            pending.complete(self.backend)

    # --- issuing ----------------------------------------------------------------------------------
    def _flush(self, bucket: _Bucket, unit: str, phase: str, group: Any) -> None:
        filled = bucket.offset
        if filled == 0:
            return
        rows = bucket.rows(self.world_size)
        if self.list_api:  # each row's filled part is contiguous: no copy
            collective, inputs = LIST, [rows[rank, :filled] for rank in range(self.world_size)]
        elif filled == bucket.stride:
            collective, inputs = FLAT, bucket.buffers.data[: self.world_size * filled]
        else:  # the flat API needs the filled parts of the rows next to each other
            if bucket.buffers.staging is None:
                raise RuntimeError("a reserved bucket was flushed before it was full")
            inputs = bucket.buffers.staging[: self.world_size * filled]
            inputs.view(self.world_size, filled).copy_(rows[:, :filled])
            collective = FLAT
        args = CollectiveArgs(input=inputs, output=bucket.buffers.output[:filled], op=self.op,
                              process_group=group)
        self._issue(collective, args, unit, phase, filled)
        pending = Pending(args, bucket.callbacks)
        if self._issuer().async_op:
            bucket.ring.hold(bucket.index, pending)
        else:
            pending.complete(self.backend)
        bucket.next_buffers()

    def _reduce_directly(self, grad: torch.Tensor, callback: Callable[[torch.Tensor], None],
                         output: torch.Tensor, predivide: float, unit: str, group: Any) -> None:
        chunk = grad.numel() // self.world_size
        index = None
        source = grad
        if predivide != 1:
            if self._direct is None or self._direct_numel < grad.numel():
                raise ValueError("the bucketer was built without room to divide this gradient")
            index, staging = self._direct.take()
            source = staging[: grad.numel()]
            scaled_copy(source, grad, predivide)
        if self.list_api:
            collective, inputs = LIST, list(source.view(self.world_size, chunk).unbind(0))
        else:
            collective, inputs = FLAT, source
        args = CollectiveArgs(input=inputs, output=output, op=self.op, process_group=group)
        self._issue(collective, args, unit, "backward", chunk)
        pending = Pending(args, [partial(callback, output)])
        if not self._issuer().async_op:
            pending.complete(self.backend)
        elif index is not None:
            self._direct.hold(index, pending)
        else:
            self._undivided.append(pending)

    def _issue(self, collective: str, args: CollectiveArgs, unit: str, phase: str, chunk: int) -> None:
        size = chunk * self.world_size * self._element_size
        label = Label(collective, unit, phase, size, chunk, dtype_name(self.dtype), self.op)
        self._issuer().issue(label, args)

    def _issuer(self) -> Issuer:
        if self.issuer is None:
            raise RuntimeError("the bucketer has no issuer: the step sets one before it runs")
        return self.issuer
