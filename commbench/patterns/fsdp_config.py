"""The FSDP pattern's configuration and its checks, apart from the pattern (fsdp.py) so that a launcher
validates a command line without importing torch."""

from dataclasses import dataclass, field, replace

from commbench.config.launch import LaunchConfig, resolve_launch
from commbench.core.dtypes import canonical_dtype
from commbench.errors import UsageError
from commbench.patterns.models import load_model
from commbench.patterns.sharding import FSDP_VERSIONS, is_power_of_two, parse_buckets

PATTERN = "fsdp"
GRADIENT_DTYPES = ("float32", "bfloat16", "float16", "float64")
FALLBACKS = ("none", "list")


@dataclass(kw_only=True)
class FsdpConfig:
    """One `commbench pattern fsdp` run."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    model: str = "gpt2-small"  # a preset name or a YAML file
    layers: int | None = None  # keep only the first N layer units
    fsdp_version: int = 2  # 2: fully_shard (per-parameter dim-0 shards); 1: FullyShardedDataParallel
    buckets: list[str] = field(default_factory=lambda: ["unit"])  # 'unit' or sizes in MiB
    predivide: float | None = None  # None: FSDP's own reduction (AVG, or a split division for float16)
    postdivide: float | None = None
    fallback: str = "none"  # 'list': list reduce_scatter / all_gather instead of the flat APIs
    reshard: bool = True  # re-gather non-root parameters in the backward pass (FSDP's FULL_SHARD)
    overlap: bool = False
    compute_size: str = "auto"  # matmul size for --overlap, or 'auto': as long as the communication
    check: bool = False
    dtype: str = "float32"  # the model's dtype: all-gathers and reduce-scatters unless set apart below
    param_dtype: str | None = None  # mixed precision: the all-gathers' dtype
    reduce_dtype: str | None = None  # mixed precision: the reduce-scatters' dtype [default: param_dtype]
    warmup: int = 0  # the dry step that sizes every buffer comes first; the median of 3 absorbs a cold step
    iters: int = 3
    max_memory: int | None = None  # bytes per rank the run may hold; None: the budget the ranks agree on
    pattern: str = PATTERN

    def check_world(self, world_size: int) -> None:
        """Any world size shards the model (parameters are padded to a multiple of it)."""

    @property
    def variant(self) -> str:
        return f"fsdp{self.fsdp_version}"

    def dtypes(self) -> tuple[str, str]:
        """(all-gather dtype, reduce-scatter dtype): FSDP's reduce_dtype defaults to param_dtype."""
        param = self.param_dtype or self.dtype
        return param, self.reduce_dtype or param


def resolve_fsdp(config: FsdpConfig) -> FsdpConfig:
    """A validated copy; UsageError (exit 2) on the first problem, before any process group starts."""
    load_model(config.model, config.layers)  # the spec's problems surface here, naming the file
    if config.fsdp_version not in FSDP_VERSIONS:
        raise UsageError(f"--fsdp-version {config.fsdp_version}: choose 2 (fully_shard) or 1 "
                         "(FullyShardedDataParallel)")
    names = {}
    for flag, value in (("--dtype", config.dtype), ("--param-dtype", config.param_dtype),
                        ("--reduce-dtype", config.reduce_dtype)):
        names[flag] = None if value is None else canonical_dtype(value)
        if names[flag] is not None and names[flag] not in GRADIENT_DTYPES:
            raise UsageError(f"{flag} {names[flag]}: FSDP parameters and gradients are floating point; "
                             f"choose from {', '.join(GRADIENT_DTYPES)}")
    buckets = [bucketing.label for bucketing in parse_buckets(",".join(config.buckets))]
    for flag, value in (("--predivide", config.predivide), ("--postdivide", config.postdivide)):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} {value:g} must be above 0")
    if config.check and config.predivide is not None and not is_power_of_two(config.predivide):
        raise UsageError(f"--check needs a power-of-two --predivide (got {config.predivide:g}) so that "
                         "every sum is exact whatever order the ranks add in")
    if config.fallback not in FALLBACKS:
        raise UsageError(f"--fallback {config.fallback!r}: choose none or list")
    compute_size = str(config.compute_size).strip().lower()
    if compute_size != "auto" and (not compute_size.isdigit() or int(compute_size) < 1):
        raise UsageError(f"--compute-size {config.compute_size!r}: give a matrix size such as 1024, or auto")
    if config.max_memory is not None and config.max_memory <= 0:
        raise UsageError("--max-memory must be above 0 bytes")
    for flag, value, minimum in (("--warmup", config.warmup, 0), ("--iters", config.iters, 1)):
        if value < minimum:
            raise UsageError(f"{flag} {value} must be at least {minimum}")
    return replace(config, launch=resolve_launch(config.launch), dtype=names["--dtype"],
                   param_dtype=names["--param-dtype"], reduce_dtype=names["--reduce-dtype"], buckets=buckets,
                   compute_size=compute_size)
