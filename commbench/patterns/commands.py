"""The `commbench pattern` commands: fsdp, and the activation patterns tp, moe, pp and 3d.

Every option has a full long name that is not a prefix of a torchrun option (see cli/options.py).
Importing this module does not import torch: a command imports its pattern when it runs.
"""

from collections.abc import Callable
from typing import Any

import click

from commbench.config.launch import LAUNCH_FIELDS, LaunchConfig
from commbench.config.sweep import parse_list
from commbench.core.sizes import parse_size

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
# pattern moe's default model: the shipped mixture of experts (gpt2-small, the others' default, has none)
DEFAULT_MOE_MODEL = "mixtral-8x7b"


def _launch_config(ctx: click.Context, options: dict[str, Any]) -> LaunchConfig:
    """The launch settings among a command's options (taken out of ``options``)."""
    launch_values = {name: options.pop(name) for name in LAUNCH_FIELDS if name in options}
    return LaunchConfig(**launch_values, argv=list(ctx.obj["argv"]))


def _apply(command: Callable[..., Any], decorators: list[Decorator]) -> Callable[..., Any]:
    for decorator in reversed(decorators):  # decorators apply bottom-up: keep the listed order in --help
        command = decorator(command)
    return command




def _model(default: str) -> Decorator:
    return click.option("--model", "model", default=default, show_default=True,
                        help="A preset (configs/models: gpt2-small, llama-7b, mixtral-8x7b, tiny, tiny-moe) "
                             "or a YAML file of units, parameter shapes and dims.")


_LAYERS = click.option("--layers", type=int, default=None,
                       help="Keep only the model's first N layers (cuts a big model down for CPU).")
_CHECK_HELP = "Run one untimed step first with known inputs and verify every collective's outputs."


def fsdp_options(command: Callable[..., Any]) -> Callable[..., Any]:
    return _apply(command, [
        _model("gpt2-small"), _LAYERS,
        click.option("--fsdp-version", type=click.Choice(["2", "1"]), default="2", show_default=True,
                     help="2: torch's fully_shard (per-parameter shards, AVG); 1: FullyShardedDataParallel "
                          "(a flat parameter per unit, summed between divisions)."),
        click.option("--bucket-mb", "buckets", default="unit", show_default=True,
                     help="Comma list of reduce-scatter bucketings: 'unit' (one per FSDP unit) or a bucket "
                          "size in MiB (0: one reduce-scatter per parameter), e.g. unit,0,1,5,25,100."),
        click.option("--predivide", type=float, default=None,
                     help="Sum gradients divided by this before the reduce-scatter [default: FSDP's own "
                          "reduction: AVG, or a split of the world size for float16 and FSDP1]."),
        click.option("--postdivide", type=float, default=None,
                     help="Divide summed gradients by this [default: world size / predivide]."),
        click.option("--fallback", type=click.Choice(["none", "list"]), default="none", show_default=True,
                     help="'list': list reduce_scatter and all_gather over views instead of the flat APIs."),
        click.option("--reshard/--no-reshard", default=True, show_default=True,
                     help="Re-gather each block's parameters in the backward pass (FULL_SHARD; the root is "
                          "never resharded)."),
        click.option("--overlap", is_flag=True,
                     help="Also time the step with a matmul per unit and pass while collectives are in "
                          "flight."),
        click.option("--compute-size", default="auto", show_default=True,
                     help="The --overlap matmul's size N (N x N), or auto: as long as the communication."),
        click.option("--check", is_flag=True,
                     help="Verify gathered parameters and reduced gradients, bucketed against unbucketed."),
        click.option("--dtype", default="float32", show_default=True,
                     help="The model's dtype: float32, bfloat16, float16 or float64."),
        click.option("--param-dtype", default=None,
                     help="Mixed precision: all-gather parameters in this dtype [default: --dtype]."),
        click.option("--reduce-dtype", default=None,
                     help="Mixed precision: reduce-scatter gradients in this dtype [default: "
                          "--param-dtype]."),
        click.option("--warmup", type=int, default=0, show_default=True, help="Untimed steps per bucketing."),
        click.option("--iters", type=int, default=3, show_default=True, help="Timed steps per bucketing."),
        click.option("--max-memory", default=None,
                     help="Bytes per rank the run may hold, e.g. 8G [default: 90% of the memory available "
                          "to each rank]; a run estimated above it is refused before it allocates."),
    ])


def activation_options(default_model: str = "gpt2-small") -> Decorator:
    """The options tp, moe, pp and 3d share: the model (moe's default has experts) and one micro-batch's
    shape."""
    return lambda command: _apply(command, [
        _model(default_model), _LAYERS,
        click.option("--seq-len", type=int, default=None,
                     help="Tokens per sequence [default: the model's context, at most 4096]."),
        click.option("--micro-batch-size", type=int, default=1, show_default=True,
                     help="Sequences per micro-batch."),
        click.option("--dtype", default="bfloat16", show_default=True,
                     help="Activations and gradients: bfloat16, float16, float32 or float64."),
        click.option("--check", is_flag=True, help=_CHECK_HELP),
        click.option("--warmup", type=int, default=0, show_default=True, help="Untimed steps."),
        click.option("--iters", type=int, default=3, show_default=True, help="Timed steps."),
    ])


_TP = click.option("--tp", type=int, default=None,
                   help="Tensor-parallel ranks per group [default: tp: the world; 3d: 1].")
_SEQUENCE_PARALLEL = click.option(
    "--sequence-parallel/--no-sequence-parallel", default=True, show_default=True,
    help="Shard activations along the sequence: all-gather and reduce-scatter instead of all-reduce.")
_MICRO_BATCHES = click.option("--micro-batches", type=int, default=8, show_default=True,
                              help="Micro-batches per step through the pipeline.")
_COMPUTE = click.option("--compute-size", type=int, default=0, show_default=True,
                        help="A N x N matmul per layer and micro-batch forward, two backward: the compute "
                             "the pipeline's bubble and the critical path are measured against (0: none).")


def fsdp(ctx: click.Context, buckets: str, fsdp_version: str, **options: Any) -> int:
    """One FSDP2 or FSDP1 training step, as torch issues it: all-gathers, padded reduce-scatters,
    bucketing, and (--overlap) their overlap with compute."""
    from commbench.patterns.fsdp_config import FsdpConfig, resolve_fsdp
    from commbench.running.launch import deferred, launch

    max_memory = options.pop("max_memory")
    config = FsdpConfig(launch=_launch_config(ctx, options), fsdp_version=int(fsdp_version),
                        buckets=parse_list(buckets, "--bucket-mb") or [buckets],
                        max_memory=None if max_memory is None else parse_size(max_memory), **options)
    return launch([resolve_fsdp(config)], work=deferred("commbench.patterns.fsdp", "run_fsdp"))


def tp(ctx: click.Context, **options: Any) -> int:
    """Tensor (and sequence) parallelism, Megatron-LM's layout: per layer the all-gathers and
    reduce-scatters (or all-reduces) of the activations, forward and backward."""
    return _run_parallel(ctx, "tp", options)


def moe(ctx: click.Context, **options: Any) -> int:
    """Expert parallelism: per MoE layer the count exchange and the dispatch and combine all-to-all(v)
    of a top-k router's tokens, with the per-step imbalance."""
    return _run_parallel(ctx, "moe", options)


def pp(ctx: click.Context, **options: Any) -> int:
    """Pipeline parallelism: 1F1B's activations forward and gradients backward between stages, point
    to point, with the bubble."""
    return _run_parallel(ctx, "pp", options)


def three_d(ctx: click.Context, **options: Any) -> int:
    """Tensor, pipeline and data parallelism on one world, each group running its pattern at once:
    per-group times and the step's critical path."""
    return _run_parallel(ctx, "3d", options)


COMMANDS: list[tuple[str, Callable[..., int], list[Decorator]]] = [
    ("fsdp", fsdp, [fsdp_options]),
    ("tp", tp, [activation_options(), _TP, _SEQUENCE_PARALLEL]),
    ("moe", moe, [activation_options(DEFAULT_MOE_MODEL),
                  click.option("--routing-skew", type=float, default=1.0, show_default=True,
                               help="Zipf exponent of expert popularity (0: uniform routing)."),
                  click.option("--seed", type=int, default=0, show_default=True,
                               help="Seed of the routing draws.")]),
    ("pp", pp, [activation_options(),
                click.option("--pp", type=int, default=None, help="Pipeline stages [default: the world]."),
                _MICRO_BATCHES, _COMPUTE]),
    ("3d", three_d, [activation_options(), _TP, click.option("--pp", type=int, default=1, show_default=True,
                                                          help="Pipeline stages."),
                     click.option("--dp", type=int, default=None,
                                  help="Data-parallel ranks [default: the world / (tp x pp)]."),
                     _SEQUENCE_PARALLEL, _MICRO_BATCHES, _COMPUTE]),
]


def pattern_group(launch_options: Decorator) -> click.Group:
    """The `pattern` group; ``launch_options`` are the options every measuring command shares."""
    quiet = click.option("--quiet", is_flag=True, help="Print nothing but errors; files are still written.")

    @click.group(invoke_without_command=True)
    @click.pass_context
    def pattern(ctx: click.Context) -> int:
        """Workload patterns: the collectives of a training step, as a training stack issues them."""
        if ctx.invoked_subcommand is None:  # `commbench pattern` alone lists the patterns
            click.echo(ctx.get_help())
        return 0

    for name, callback, decorators in COMMANDS:
        pattern.command(name)(_apply(click.pass_context(callback), [*decorators, launch_options, quiet]))
    return pattern


def _run_parallel(ctx: click.Context, pattern: str, options: dict[str, Any]) -> int:
    from commbench.patterns.parallel import ParallelConfig, resolve_parallel
    from commbench.running.launch import deferred, launch

    config = ParallelConfig(launch=_launch_config(ctx, options), pattern=pattern, **options)
    work = deferred("commbench.patterns.parallel_run", "run_parallel")
    return launch([resolve_parallel(config)], work=work)
