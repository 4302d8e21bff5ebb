"""How FSDP lays a model out over n ranks, and how it reduces gradients: pure arithmetic, no tensors.

Two layouts, as torch has them:

- FSDP2 (``fully_shard``): every parameter is its own shard. Dim 0 is padded to a multiple of n and split:
  a rank's chunk is ``ceil(dim0 / n) x (the other dims)`` elements, and the padding is the rows added at
  the end (``n x chunk - numel``).
- FSDP1 (``FullyShardedDataParallel``, use_orig_params=False): a unit's parameters are flattened into one
  flat parameter, padded at its end to a multiple of n and split into n chunks of ``ceil(numel / n)``.

A unit's shard on a rank is its parameters' chunks one after another, so a unit's all-gather output and
reduce-scatter input are ``n x shard`` elements: row r is rank r's shard. A root unit (the root module's
own parameters) is gathered once in forward and kept for backward: FSDP never reshards the root after
forward. The reduction: FSDP2 averages float32 and bfloat16 gradients with ReduceOp.AVG and no division,
and splits the division around a sum for other reduce dtypes (float16 overflows); FSDP1 always sums with
the split division.
"""

from dataclasses import dataclass

from commbench.errors import UsageError
from commbench.patterns.models import ModelSpec, ParamSpec, UnitSpec

MIB = 1024 * 1024
FSDP_VERSIONS = (1, 2)
FLAT_PARAM = "flat_param"  # the name FSDP1's one parameter per unit goes by here


@dataclass(frozen=True)
class ShardedParam:
    name: str
    numel: int
    chunk: int  # elements in each rank's chunk
    offset: int  # where this parameter's chunk starts within its unit's shard
    index: int  # position in the whole model (gives --check values that differ between parameters)
    world_size: int

    @property
    def padded(self) -> int:
        """The flattened gradient's length once padded: a whole number of chunks, one per rank."""
        return self.chunk * self.world_size

    @property
    def padding(self) -> int:
        return self.padded - self.numel


@dataclass(frozen=True)
class ShardedUnit:
    name: str
    params: tuple[ShardedParam, ...]
    shard_numel: int  # one rank's shard of the unit
    offset: int  # where the unit's shard starts within the rank's shard of the whole model
    world_size: int
    root: bool = False  # kept from forward to backward: no backward all-gather

    @property
    def numel(self) -> int:
        return sum(param.numel for param in self.params)

    @property
    def padding(self) -> int:
        return sum(param.padding for param in self.params)

    @property
    def full_numel(self) -> int:
        """Elements of the unit's all-gather output and reduce-scatter input."""
        return self.shard_numel * self.world_size


@dataclass(frozen=True)
class ShardPlan:
    model: ModelSpec
    world_size: int
    units: tuple[ShardedUnit, ...]
    version: int = 2

    @property
    def shard_numel(self) -> int:
        return sum(unit.shard_numel for unit in self.units)

    @property
    def padding(self) -> int:
        return sum(unit.padding for unit in self.units)

    @property
    def max_unit_shard(self) -> int:
        return max(unit.shard_numel for unit in self.units)

    def params(self) -> list[ShardedParam]:
        return [param for unit in self.units for param in unit.params]


def dim0_chunk(shape: tuple[int, ...], world_size: int) -> int:
    """FSDP2's chunk of a parameter: dim 0 padded to a multiple of n, one n-th of it per rank."""
    rest = 1
    for dim in shape[1:]:
        rest *= dim
    return -(-shape[0] // world_size) * rest


def _unit_params(unit: UnitSpec, version: int) -> tuple[ParamSpec, ...]:
    """The parameters FSDP shards: each one (FSDP2), or the unit's one flat parameter (FSDP1)."""
    if version == 1:
        return (ParamSpec(FLAT_PARAM, (unit.numel,)),)
    return unit.params


def shard_model(model: ModelSpec, world_size: int, version: int = 2) -> ShardPlan:
    if world_size < 1:
        raise ValueError(f"world size {world_size} must be at least 1")
    if version not in FSDP_VERSIONS:
        raise ValueError(f"FSDP version {version} is not one of {FSDP_VERSIONS}")
    units: list[ShardedUnit] = []
    unit_offset = 0
    index = 0
    for unit in model.units:
        params: list[ShardedParam] = []
        offset = 0
        for param in _unit_params(unit, version):
            chunk = dim0_chunk(param.shape, world_size)
            params.append(ShardedParam(param.name, param.numel, chunk, offset, index, world_size))
            offset += chunk
            index += 1
        units.append(ShardedUnit(unit.name, tuple(params), offset, unit_offset, world_size, unit.root))
        unit_offset += offset
    return ShardPlan(model, world_size, tuple(units), version)


@dataclass(frozen=True)
class Reduction:
    """How gradients are reduced: the reduce op and the divisions around it."""

    op: str  # "avg" or "sum"
    predivide: float = 1.0
    postdivide: float = 1.0


def fsdp_reduction(version: int, reduce_dtype: str, world_size: int,
                   given: tuple[float | None, float | None] = (None, None)) -> Reduction:
    """FSDP's reduction for this version and gradient dtype; ``given`` pre/post factors force a sum with
    those divisions (FSDP2's sum-for-comms path, FSDP1's hook factors)."""
    if given != (None, None):
        return Reduction("sum", *divide_factors(world_size, *given))
    if version == 2 and reduce_dtype in ("float32", "bfloat16"):
        return Reduction("avg" if world_size > 1 else "sum")
    return Reduction("sum", *default_divide_factors(world_size))


def default_divide_factors(world_size: int) -> tuple[float, float]:
    """FSDP's gradient pre- and post-division factors: predivide doubles while it divides the world size
    and stays below world_size / predivide; postdivide = world_size / predivide, so their product is the
    world size and dividing twice averages. Splitting the division keeps float16 sums from overflowing
    (everything divided once at the end) or underflowing (everything divided once at the start)."""
    factor = 1
    while world_size % factor == 0 and world_size / factor > factor:
        factor *= 2
    return float(factor), world_size / factor


def divide_factors(world_size: int, predivide: float | None, postdivide: float | None
                   ) -> tuple[float, float]:
    """The factors a run uses: the defaults, or the user's, the missing one making the product n."""
    if predivide is None and postdivide is None:
        return default_divide_factors(world_size)
    if postdivide is None:
        return float(predivide), world_size / predivide
    if predivide is None:
        return world_size / postdivide, float(postdivide)
    return float(predivide), float(postdivide)


def is_power_of_two(value: float) -> bool:
    return value > 0 and float(value).is_integer() and (int(value) & (int(value) - 1)) == 0


@dataclass(frozen=True)
class Bucketing:
    """How the backward pass groups gradients into reduce-scatters.

    ``unit``: one reduce-scatter per unit (FSDP's own grouping). A size in MiB: gradients queue into a
    bucket of that many bytes (all ranks' chunks together, as fairscale counts it); a bucket is
    reduce-scattered when the next gradient would overflow it and at the end of the backward pass, and a
    gradient larger than the bucket is reduce-scattered on its own. 0: one reduce-scatter per parameter.
    """

    label: str  # "unit" or the size in MiB as rows carry it: "0", "1", "2.5"
    capacity_bytes: int | None  # None for per-unit grouping

    @property
    def per_unit(self) -> bool:
        return self.capacity_bytes is None

    def capacity_elements(self, plan: ShardPlan, element_size: int) -> int:
        """Elements of each rank's chunk that fit in the bucket (never more than the whole model's: a
        larger bucket would behave the same and only take memory)."""
        if self.capacity_bytes is None:
            return plan.max_unit_shard
        return min(plan.shard_numel, self.capacity_bytes // (element_size * plan.world_size))

    def describe(self) -> str:
        return "one per unit" if self.per_unit else f"{self.label} MiB"


def parse_buckets(text: str) -> list[Bucketing]:
    """``unit,0,1,25``: 'unit' or sizes in MiB (whole or decimal, at least 0), duplicates dropped."""
    found: dict[str, Bucketing] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.lower() == "unit":
            found.setdefault("unit", Bucketing("unit", None))
            continue
        try:
            mib = float(part)
        except ValueError:
            raise UsageError(f"--bucket-mb: {part!r} is neither a size in MiB nor 'unit'") from None
        if not mib >= 0 or mib == float("inf"):
            raise UsageError(f"--bucket-mb: {part!r} must be a size of at least 0 MiB")
        label = f"{mib:g}"
        found.setdefault(label, Bucketing(label, int(mib * MIB)))
    if not found:
        raise UsageError("--bucket-mb: no bucket size given; e.g. --bucket-mb unit,0,1,25")
    return list(found.values())
