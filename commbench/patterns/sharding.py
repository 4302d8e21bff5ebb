"""How FSDP lays a model out over n ranks: pure arithmetic, no tensors.

Each parameter is flattened, padded with zeros to a multiple of n elements and split into n equal chunks;
rank r holds chunk r (``chunk = ceil(numel / n)``, ``padding = n * chunk - numel``). A unit's shard on a
rank is the concatenation of its parameters' chunks, so a unit's all-gather output and reduce-scatter
input are ``n x shard`` elements: row r is rank r's shard. This is the layout of per-parameter sharding
(PyTorch FSDP2, fairscale with flatten_parameters=False); one all-gather and one reduce-scatter per unit
move every parameter of the unit.
"""

from dataclasses import dataclass

from commbench.errors import UsageError
from commbench.patterns.models import ModelSpec

MIB = 1024 * 1024


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


def shard_model(model: ModelSpec, world_size: int) -> ShardPlan:
    if world_size < 1:
        raise ValueError(f"world size {world_size} must be at least 1")
    units: list[ShardedUnit] = []
    unit_offset = 0
    index = 0
    for unit in model.units:
        params: list[ShardedParam] = []
        offset = 0
        for param in unit.params:
            chunk = -(-param.numel // world_size)  # ceil
            params.append(ShardedParam(param.name, param.numel, chunk, offset, index, world_size))
            offset += chunk
            index += 1
        units.append(ShardedUnit(unit.name, tuple(params), offset, unit_offset, world_size))
        unit_offset += offset
    return ShardPlan(model, world_size, tuple(units))


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
