"""The workload patterns' configurations and their checks, apart from the patterns themselves so that a
launcher validates a command line without importing torch: FsdpConfig (`pattern fsdp`) and
ParallelConfig (the activation patterns tp, moe, pp and 3d, which share one; each reads the fields that
concern it, and offers the options whose ``only`` names it). Each field declares its option
(config/options.py); the mesh the activation patterns run on is parallel.py's.
"""

from dataclasses import dataclass, field, replace

from commbench.config.launch import LaunchConfig, resolve_launch
from commbench.config.options import check_options, option
from commbench.core.dtypes import canonical_dtype
from commbench.core.sizes import parse_size
from commbench.errors import UsageError
from commbench.patterns.models import ModelSpec, load_model
from commbench.patterns.parallel import Mesh
from commbench.patterns.sharding import FSDP_VERSIONS, is_power_of_two, parse_buckets

FSDP = "fsdp"
GRADIENT_DTYPES = ("float32", "bfloat16", "float16", "float64")
FALLBACKS = ("none", "list")
ACTIVATION_DTYPES = ("bfloat16", "float16", "float32", "float64")
DEFAULT_MAX_SEQ_LEN = 4096  # without --seq-len: the model's context, at most this (Megatron's usual length)
# pattern moe's default model: the shipped mixture of experts (gpt2-small, the others' default, has none)
DEFAULT_MOE_MODEL = "mixtral-8x7b"
MODEL_HELP = ("A preset (configs/models: gpt2-small, llama-7b, mixtral-8x7b, tiny, tiny-moe) or a YAML file "
              "of units, parameter shapes and dims.")
LAYERS_HELP = "Keep only the model's first N layers (cuts a big model down for CPU)."


@dataclass(kw_only=True)
class FsdpConfig:
    """One `commbench pattern fsdp` run."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    model: str = option("gpt2-small", help=MODEL_HELP)  # a preset name or a YAML file
    layers: int | None = option(None, minimum=1, help=LAYERS_HELP)  # keep only the first N layer units
    fsdp_version: int = option(  # 2: fully_shard (per-parameter dim-0 shards); 1: FullyShardedDataParallel
        2, metavar="[2|1]",
        help="2: torch's fully_shard (per-parameter shards, AVG); 1: FullyShardedDataParallel (a flat "
             "parameter per unit, summed between divisions).")
    buckets: list[str] = option(  # 'unit' or sizes in MiB
        factory=lambda: ["unit"], flag="--bucket-mb",
        help="Comma list of reduce-scatter bucketings: 'unit' (one per FSDP unit) or a bucket size in MiB "
             "(0: one reduce-scatter per parameter), e.g. unit,0,1,5,25,100.")
    predivide: float | None = option(  # None: FSDP's own reduction (AVG, or a split division for float16)
        None, above=0,
        help="Sum gradients divided by this before the reduce-scatter [default: FSDP's own reduction: AVG, "
             "or a split of the world size for float16 and FSDP1].")
    postdivide: float | None = option(
        None, above=0, help="Divide summed gradients by this [default: world size / predivide].")
    fallback: str = option(  # 'list': list reduce_scatter / all_gather instead of the flat APIs
        "none", choices=FALLBACKS, metavar="[none|list]",
        help="'list': list reduce_scatter and all_gather over views instead of the flat APIs.")
    reshard: bool = option(  # re-gather non-root parameters in the backward pass (FSDP's FULL_SHARD)
        True, off_flag="--no-reshard",
        help="Re-gather each block's parameters in the backward pass (FULL_SHARD; the root is never "
             "resharded).")
    overlap: bool = option(
        False, help="Also time the step with a matmul per unit and pass while collectives are in flight.")
    compute_size: str = option(  # matmul size for --overlap, or 'auto': as long as the communication
        "auto", help="The --overlap matmul's size N (N x N), or auto: as long as the communication.")
    check: bool = option(
        False, help="Verify gathered parameters and reduced gradients, bucketed against unbucketed.")
    dtype: str = option(  # all-gathers and reduce-scatters unless set apart below
        "float32", help="The model's dtype: float32, bfloat16, float16 or float64.")
    param_dtype: str | None = option(
        None, help="Mixed precision: all-gather parameters in this dtype [default: --dtype].")
    reduce_dtype: str | None = option(
        None, help="Mixed precision: reduce-scatter gradients in this dtype [default: --param-dtype].")
    # the dry step that sizes every buffer comes first; the median of 3 absorbs a cold step
    warmup: int = option(0, minimum=0, help="Untimed steps per bucketing.")
    iters: int = option(3, minimum=1, help="Timed steps per bucketing.")
    max_memory: int | None = option(  # None: the budget the ranks agree on
        None, parse=parse_size, above=0, bounds="must be above 0 bytes",
        help="Bytes per rank the run may hold, e.g. 8G [default: 90% of the memory available to each rank]; "
             "a run estimated above it is refused before it allocates.")
    pattern: str = FSDP

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
    check_options(config)
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
    if config.check and config.predivide is not None and not is_power_of_two(config.predivide):
        raise UsageError(f"--check needs a power-of-two --predivide (got {config.predivide:g}) so that "
                         "every sum is exact whatever order the ranks add in")
    compute_size = str(config.compute_size).strip().lower()
    if compute_size != "auto" and (not compute_size.isdigit() or int(compute_size) < 1):
        raise UsageError(f"--compute-size {config.compute_size!r}: give a matrix size such as 1024, or auto")
    return replace(config, launch=resolve_launch(config.launch), dtype=names["--dtype"],
                   param_dtype=names["--param-dtype"], reduce_dtype=names["--reduce-dtype"], buckets=buckets,
                   compute_size=compute_size)


@dataclass(kw_only=True)
class ParallelConfig:
    """One `commbench pattern tp|moe|pp|3d` run; each pattern reads the fields that concern it."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    pattern: str = "tp"
    model: str = option("gpt2-small", help=MODEL_HELP)
    layers: int | None = option(None, minimum=1, help=LAYERS_HELP)
    seq_len: int | None = option(  # None: the model's context, at most DEFAULT_MAX_SEQ_LEN
        None, minimum=1, help="Tokens per sequence [default: the model's context, at most 4096].")
    micro_batch_size: int = option(1, minimum=1, help="Sequences per micro-batch.")
    micro_batches: int = option(
        8, minimum=1, only=("pp", "3d"), help="Micro-batches per step through the pipeline.")
    tp: int | None = option(  # tp: the world unless given
        None, minimum=1, only=("tp", "3d"),
        help="Tensor-parallel ranks per group [default: tp: the world; 3d: 1].")
    pp: int | None = option(  # 3d's default is 1 (its registration's)
        None, minimum=1, only=("pp", "3d"), shown_default="the world", help="Pipeline stages.")
    dp: int | None = option(
        None, minimum=1, only=("3d",), help="Data-parallel ranks [default: the world / (tp x pp)].")
    sequence_parallel: bool = option(  # all-gather / reduce-scatter instead of all-reduce
        True, off_flag="--no-sequence-parallel", only=("tp", "3d"),
        help="Shard activations along the sequence: all-gather and reduce-scatter instead of all-reduce.")
    routing_skew: float = option(
        1.0, minimum=0, maximum=10, bounds="must be between 0 (uniform) and 10", only=("moe",),
        help="Zipf exponent of expert popularity (0: uniform routing).")
    seed: int = option(0, only=("moe",), help="Seed of the routing draws.")
    compute_size: int = option(  # a size x size matmul per layer and micro-batch forward (0: none)
        0, minimum=0, only=("pp", "3d"),
        help="A N x N matmul per layer and micro-batch forward, two backward: the compute the pipeline's "
             "bubble and the critical path are measured against (0: none).")
    dtype: str = option("bfloat16", help="Activations and gradients: bfloat16, float16, float32 or float64.")
    check: bool = option(
        False, help="Run one untimed step first with known inputs and verify every collective's outputs.")
    warmup: int = option(0, minimum=0, help="Untimed steps.")
    iters: int = option(3, minimum=1, help="Timed steps.")

    def check_world(self, world_size: int) -> None:
        """The mesh must tile the world and every split must divide what it splits."""
        model = load_model(self.model, self.layers)
        mesh = self.mesh(world_size)
        dims = model.require_dims(self.pattern)
        tp = mesh.size("tp")
        sized = self.for_world(model, world_size)
        if self.sequence_parallel and self.pattern in ("tp", "3d") and sized.tokens(model) % tp:
            raise UsageError(f"sequence parallel splits {sized.seq_len_of(model)} x {self.micro_batch_size} "
                             f"tokens over {tp} tensor-parallel ranks: choose a --seq-len they divide")
        if self.pattern == "moe":
            if not dims.is_moe:
                raise UsageError(f"model {model.name} has no experts (dims.experts): pattern moe needs a "
                                 "mixture-of-experts model such as mixtral-8x7b")
            if dims.experts % world_size:
                raise UsageError(f"{dims.experts} experts do not divide over {world_size} expert-parallel "
                                 "ranks: choose a world size that divides them")
        stages = mesh.size("pp")
        if stages > dims.layers:
            raise UsageError(f"{stages} pipeline stages need at least as many layers; the model has "
                             f"{dims.layers}")

    def mesh(self, world_size: int) -> "Mesh":
        """The dimensions this pattern runs on, outermost first; UsageError when they do not tile."""
        if self.pattern == "moe":
            return Mesh(("ep",), (world_size,))
        if self.pattern == "pp":
            return Mesh(("pp",), (self.pp or world_size,)).fits(world_size)
        tp = self.tp or world_size if self.pattern == "tp" else self.tp or 1
        pp = 1 if self.pattern == "tp" else self.pp or 1
        if world_size % (tp * pp):
            raise UsageError(f"--tp {tp} x --pp {pp} = {tp * pp} ranks do not divide the world of "
                             f"{world_size}")
        dp = self.dp or world_size // (tp * pp)
        return Mesh(("pp", "dp", "tp"), (pp, dp, tp)).fits(world_size)

    def seq_len_of(self, model: ModelSpec) -> int:
        return self.seq_len or min(model.require_dims(self.pattern).context, DEFAULT_MAX_SEQ_LEN)

    def for_world(self, model: ModelSpec, world_size: int) -> "ParallelConfig":
        """This run on ``world_size`` ranks: without --seq-len, the default length shortened (by less
        than the tensor-parallel size) so that sequence parallelism splits the tokens evenly; a length
        the user gave is kept, and check_world refuses it if it does not split."""
        if self.seq_len is not None or not self.sequence_parallel or self.pattern not in ("tp", "3d"):
            return self
        tp = self.mesh(world_size).size("tp")
        seq_len = self.seq_len_of(model)
        while seq_len > 1 and seq_len * self.micro_batch_size % tp:
            seq_len -= 1
        return replace(self, seq_len=seq_len)

    def tokens(self, model: ModelSpec) -> int:
        """Tokens in one micro-batch: sequence length x micro-batch size."""
        return self.seq_len_of(model) * self.micro_batch_size


def resolve_parallel(config: ParallelConfig) -> ParallelConfig:
    """A validated copy; UsageError (exit 2) on the first problem, before any process group starts."""
    check_options(config)
    load_model(config.model, config.layers).require_dims(config.pattern)
    dtype = canonical_dtype(config.dtype)
    if dtype not in ACTIVATION_DTYPES:
        raise UsageError(f"--dtype {dtype}: activations and gradients are floating point; choose from "
                         f"{', '.join(ACTIVATION_DTYPES)}")
    return replace(config, launch=resolve_launch(config.launch), dtype=dtype)
